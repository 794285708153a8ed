"""Build images: base images, a build through the engine's CLI, the lock, labels, atomic tags.

Every engine call goes through a `kernellab.engine.Engine` (Docker with BuildKit, or Podman).
An image is tagged only after the build and the lock succeeded: a failed or interrupted build
leaves no half-tagged image, and the previous image of that tag stays.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
import sys
import tempfile
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from . import ROOT, kinds, network, proc, progress, render
from .engine import Engine, resolve_engine
from .errors import BuildError, CommandError, KernellabError, ResolveError
from .kinds import debootstrap_cpu, torch_index
from .resolve import BaseFacts, Spec, resolve
from .targets import DOCKER_DIR, Matrix, load

LOCK_DIR = DOCKER_DIR / "locks"
ENVINFO = Path(__file__).with_name("envinfo.py")


# --------------------------------------------------------------------------- base images

def make_debootstrap_base(suite: str, *, out: IO[str] = sys.stdout, engine: Engine | None = None) -> str:
    """Make `kernellab-base:debian-<suite>` from Debian's archive with debootstrap (needs root)."""
    return debootstrap_cpu.make_base(suite, engine=resolve_engine(engine), out=out)


def ensure_base(spec: Spec, *, out: IO[str] = sys.stdout, engine: Engine | None = None) -> tuple[str, str]:
    """Make sure spec's base image is present (its kind makes or pulls it); return (reference, digest or image ID)."""
    return kinds.get(spec.kind).ensure_base(spec, engine=resolve_engine(engine), out=out)


def probe_base(image: str, engine: Engine | None = None) -> BaseFacts:
    """Find the Python and PyTorch a --base-image already has (runs it once, without network)."""
    eng = resolve_engine(engine)
    if not eng.exists(image):
        raise ResolveError(f"base image `{image}` is not present; `{eng.name} pull {image}`, `{eng.name} load`, or "
                           f"`invoke import-image DIR` first.")
    code = ("import json, platform\ntry:\n import torch; t, c = torch.__version__, torch.version.cuda\n"
            "except Exception:\n t = c = None\nprint(json.dumps([platform.python_version(), t, c]))")
    r = proc.run(_plain_run(eng, image, ["-c", code], entrypoint="python3"), check=False)
    if not r.ok:
        raise ResolveError(f"base image `{image}` has no working python3 ({r.stderr.strip()[-200:]}); "
                           f"kernellab needs python3 with torch in a --base-image.")
    py, torch, cuda = json.loads(r.stdout.strip().splitlines()[-1])
    return BaseFacts(python=py, torch=torch, torch_cuda=cuda)


# --------------------------------------------------------------------------- resolving what to build

def _plain_run(eng: Engine, image: str, command: list[str], *, entrypoint: str, mounts: tuple[str, ...] = ()
               ) -> list[str]:
    """A throwaway container with no network, as the engine's default user: for probing images."""
    return eng.run_argv(image, command, user=(0, 0), network="none", entrypoint=entrypoint, mounts=mounts,
                        init=False, shm_size=None)


def resolve_request(*, target: str | None = None, base_image: str | None = None, matrix: Matrix | None = None,
                    engine: Engine | None = None, **flags: Any) -> Spec:
    """resolve() plus what needs Docker: facts about a --base-image. The index: torch_index.choose_index.

    Tasks and tests resolve through here, so both pick the same PyTorch index for the same environment.
    """
    matrix = matrix or load()
    named = matrix.targets.get(target) if target else None
    base = base_image or (named.base if named else None)
    facts = probe_base(base, engine) if base is not None and kinds.probes(base) else None
    return resolve(matrix, target=target, base_image=base_image, base_facts=facts,
                   torch_index=torch_index.choose_index(matrix)[0], **flags)


def torch_index_for_builds(matrix: Matrix) -> tuple[str | None, str]:
    """The index a build uses and a note when the matrix's was dropped: torch_index.choose_index, probing."""
    return torch_index.choose_index(matrix, probe=True)


def lock_path(spec: Spec, lock_dir: Path = LOCK_DIR) -> Path:
    name = spec.target or spec.tag.split(":", 1)[1]
    return lock_dir / f"{name}.json"


def lock_digest(lock: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(lock, sort_keys=True).encode()).hexdigest()


def read_lock(spec: Spec, lock_dir: Path = LOCK_DIR) -> dict[str, Any]:
    path = lock_path(spec, lock_dir)
    if not path.exists():
        raise BuildError(f"no lock at {path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}; build once "
                         f"without --locked to create it.")
    try:
        lock = json.loads(path.read_text())
        if not isinstance(lock["base"]["digest"], str) or not isinstance(lock["pip_freeze"], list):
            raise TypeError  # the keys a locked build needs
    except (ValueError, KeyError, TypeError):
        raise BuildError(f"the lock {path} is not a kernellab lock (bad JSON or missing keys); restore it from "
                         f"git or rebuild without --locked.") from None
    want = json.loads(json.dumps(spec.to_dict()))  # as JSON has it: tuples become lists
    if lock.get("spec") != want:
        changed = sorted(k for k in want if lock.get("spec", {}).get(k) != want[k])
        raise BuildError(f"the lock {path.name} was made for a different spec (differs in: {', '.join(changed)}); "
                         f"rebuild without --locked to refresh it, or restore the matrix it was made from.")
    return lock


# --------------------------------------------------------------------------- building

@dataclass(frozen=True)
class Built:
    spec: Spec
    image_id: str
    tags: tuple[str, ...]
    lock_file: Path
    lock_sha256: str


_STEP = re.compile(r"^\s*> \[(.+?)\] (.*?):?$")
#: A step starting: BuildKit's `#7 [stage 3/9] RUN ...`, Podman's `STEP 3/9: RUN ...`.
_STARTS = re.compile(r"^(?:#\d+ \[(?:\S+ )?(\d+)/(\d+)\]|STEP (\d+)/(\d+):) (.*)")


class BuildSteps:
    """The build log, with a bar of its steps when `out` is a terminal (in a log: the log as is)."""

    def __init__(self, out: IO[str]):
        self.out = out
        self.bar: progress.Bar | None = None
        self.tty = getattr(out, "isatty", lambda: False)()

    def write(self, line: str) -> int:
        m = _STARTS.match(line)
        if self.tty and m:
            done, total = int(m.group(1) or m.group(3)), int(m.group(2) or m.group(4))
            if self.bar is None or self.bar.total != total:
                self.close()
                self.bar = progress.Bar(total, "build", unit="step", out=self.out)
            self.bar.update_to(done - 1, m.group(5)[:50])
        if self.bar is not None:
            self.bar.write(line)
        else:
            self.out.write(line)
        return len(line)

    def flush(self) -> None:
        self.out.flush()

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None


def _build_failure(e: CommandError, spec: Spec) -> BuildError:
    step = None
    for line in e.tail.splitlines():
        m = _STEP.match(line)
        if m:
            step = f"[{m.group(1)}] {m.group(2)[:120]}"
    where = f" at step {step}" if step else ""
    return BuildError(f"building {spec.tag} failed{where}; nothing was tagged and any previous image of that tag "
                      f"is kept. Last lines:\n{e.tail.rstrip()}")


def build(
    spec: Spec,
    *,
    matrix: Matrix | None = None,
    locked: bool = False,
    ca_certs: tuple[Path, ...] = (),
    wheelhouse: Path | None = None,
    pip_config: network.PipConfig | None = None,
    no_cache: bool = False,
    lock_dir: Path = LOCK_DIR,
    out: IO[str] = sys.stdout,
    engine: Engine | None = None,
) -> Built:
    """Build spec into an image, write its lock, then label and tag it (only now)."""
    matrix = matrix or load()
    eng = resolve_engine(engine).require()
    base_ref, base_digest = ensure_base(spec, out=out, engine=eng)
    lock = read_lock(spec, lock_dir) if locked else None
    if lock and lock["base"]["digest"] != base_digest:
        out.write(f"warning: base image {base_ref} is not the one locked ({lock['base']['digest'][:19]}...)\n")
    requirements = "\n".join(lock["pip_freeze"]) + "\n" if lock else None
    proxy_args, proxy_env = network.proxy_build_args()
    if spec.torch_index:
        # Probed here, where it is used: resolving (doctor, --dry-run) stays free of network waits.
        index, note = torch_index_for_builds(matrix)
        if note:
            out.write(f"warning: {note}\n")
            spec = dataclasses.replace(spec, torch_index=index or None)  # not part of the tag or digest
    if spec.torch_index and spec.torch_index != render.public_torch_index(spec, matrix):
        # A mirror's URL may carry credentials: it goes into the secret pip.conf, not the Dockerfile.
        pip_config = pip_config or network.host_pip_config()
        extra = [*pip_config.values.get("extra-index-url", []), spec.torch_index]
        pip_config = network.PipConfig({**pip_config.values, "extra-index-url": extra})
    with tempfile.TemporaryDirectory(prefix="kl-build-") as tmp:
        ctx = Path(tmp) / "context"
        render.write_context(spec, matrix, ctx, locked=locked, certs=ca_certs, requirements=requirements,
                             base_digest=lock["base"]["digest"] if lock else None)
        iidfile = Path(tmp) / "iid"
        with network.build_pip_conf(pip_config, wheelhouse) as pipconf:
            argv, build_env = eng.build_argv(ctx, iidfile=iidfile, secrets={"pipconf": pipconf},
                                             build_args=proxy_args, no_cache=no_cache)
            out.write(f"building {spec.tag} FROM {base_ref} with {eng.name}\n")
            steps = BuildSteps(out)
            try:
                proc.run(argv, stream=True, out=steps, env={**build_env, **proxy_env})
            except CommandError as e:
                raise _build_failure(e, spec) from None
            finally:
                steps.close()
        built_id = _iid(iidfile)
        info = _envinfo(eng, built_id)
        new_lock = {
            "kernellab_lock": 1,
            "spec": spec.to_dict(),
            "base": {"ref": spec.base, "from": base_ref, "digest": base_digest},
            "arch_list": spec.arch_list,
            "gencode": spec.gencode,
            "versions": info["versions"],
            "pip_freeze": info["pip_freeze"],
        }
        if lock and lock["pip_freeze"] != new_lock["pip_freeze"]:
            diff = sorted(set(lock["pip_freeze"]) ^ set(new_lock["pip_freeze"]))
            raise BuildError(f"--locked build did not reproduce the lock's packages (differ: {', '.join(diff[:8])}); "
                             f"nothing was tagged.")
        digest = lock_digest(new_lock)
        tags = (spec.tag, *([f"kernellab:{spec.target}"] if spec.target else []))
        # The lock is written (beside its final name) before the tags move, and named after.
        path = lock_path(spec, lock_dir)
        pending = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            pending.write_text(json.dumps(new_lock, indent=2, sort_keys=True) + "\n")
        except OSError as e:
            raise BuildError(f"cannot write the lock {path} ({e.strerror}); nothing was tagged.") from None
        try:
            final_id = _label_and_tag(eng, built_id, new_lock, digest, tags, Path(tmp))
        except BaseException:
            pending.unlink(missing_ok=True)
            raise
        os.replace(pending, path)
    return Built(spec, final_id, tags, path, digest)


def _iid(iidfile: Path) -> str:
    """The image ID a build wrote, as "sha256:<hex>" (Podman writes bare hex)."""
    iid = iidfile.read_text().strip()
    return iid if iid.startswith("sha256:") else f"sha256:{iid}"


def _envinfo(eng: Engine, image: str) -> dict[str, Any]:
    """Describe the built image from inside (its venv's python, else python3)."""
    for python in ("python", "python3"):
        r = proc.run(_plain_run(eng, image, ["/tmp/kl-envinfo.py"], entrypoint=python,
                                mounts=(f"{ENVINFO}:/tmp/kl-envinfo.py:ro",)), check=False)
        if r.ok:
            return json.loads(r.stdout)
    raise BuildError(f"the image was built but its Python could not describe it (for the lock): {r.stderr.strip()[-300:]}")


def _label_and_tag(eng: Engine, built_id: str, lock: dict[str, Any], digest: str, tags: tuple[str, ...],
                   tmp: Path) -> str:
    """A last, metadata-only stage: the lock inside, its hash as a label; tags are set only here."""
    staging = f"kernellab-staging:{uuid.uuid4().hex[:12]}"
    eng.tag(built_id, staging)
    try:
        ctx = tmp / "final"
        ctx.mkdir()
        (ctx / "lock.json").write_text(json.dumps(lock, indent=2, sort_keys=True) + "\n")
        (ctx / "Dockerfile").write_text(
            f"FROM {staging}\nCOPY lock.json /etc/kernellab/lock.json\nLABEL kernellab.lock-sha256=\"{digest}\"\n")
        iid = tmp / "final.iid"
        argv, env = eng.build_argv(ctx, iidfile=iid, tags=tags, network="none")
        try:
            proc.run(argv, env=env)
        except CommandError as e:
            raise BuildError(f"labelling the built image failed; nothing was tagged. Last lines:\n{e.tail}") from None
        return _iid(iid)
    finally:
        eng.untag(staging)


def image_for_target(name: str | None = None, engine: Engine | None = None) -> str:
    """The image tag for a named target (or the default target of this machine), if it was built."""
    name = name or default_target()
    ref = f"kernellab:{name}"
    eng = resolve_engine(engine).require()
    if not eng.exists(ref):
        raise KernellabError(f"image {ref} is not built for {eng.name}; run `invoke build-image --target {name}` first.")
    return ref


def default_target() -> str:
    """The named target marked default_for "gpu" when this machine has an NVIDIA GPU, else for "cpu"."""
    from . import gpu

    want = "gpu" if gpu.host_gpus() else "cpu"
    for name, t in load().targets.items():
        if t.default_for == want:
            return name
    raise KernellabError(f"no target in docker/targets.toml has default_for = \"{want}\"; add one.")
