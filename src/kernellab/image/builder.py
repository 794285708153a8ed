"""Build images: base images, a build through the engine's CLI, the lock, labels, atomic tags.

Every engine call goes through a `kernellab.engine.Engine` (Docker with BuildKit, or Podman).
An image is tagged only after the build and the lock succeeded: a failed or interrupted build
leaves no half-tagged image, and the previous image of that tag stays.
"""
from __future__ import annotations

import dataclasses
import json
import re
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from .. import cache_root, envinfo, proc, progress
from ..engine import Engine, Image, resolve_engine
from ..errors import BuildError, CommandError, KernellabError, ResolveError
from . import debian, kinds, locks, network, render
from .kinds import debootstrap_cpu, torch_index
from .locks import LOCK_DIR, Mode, lock_digest, lock_path
from .resolve import resolve
from .spec import BaseFacts, Spec
from .targets import Matrix, load

ENVINFO = Path(envinfo.__file__)


# --------------------------------------------------------------------------- base images

def make_debootstrap_base(suite: str, *, out: IO[str] = sys.stdout, engine: Engine | None = None) -> str:
    """Make `kernellab-base:debian-<suite>` from Debian's archive (kernellab.image.debian; needs root)."""
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
    # An image never changes: what its Python said is kept per image ID (starting torch takes seconds).
    cached = cache_root() / "probes" / f"base-{eng.image_id(image).removeprefix('sha256:')}.json"
    if cached.is_file():
        return BaseFacts(*json.loads(cached.read_text()))
    code = ("import json, platform\ntry:\n import torch; t, c = torch.__version__, torch.version.cuda\n"
            "except Exception:\n t = c = None\nprint(json.dumps([platform.python_version(), t, c]))")
    r = proc.run(eng.probe_argv(image, ["-c", code], entrypoint="python3"), check=False)
    if not r.ok:
        raise ResolveError(f"base image `{image}` has no working python3 ({r.stderr.strip()[-200:]}); "
                           f"kernellab needs python3 with torch in a --base-image.")
    py, torch, cuda = json.loads(r.stdout.strip().splitlines()[-1])
    cached.parent.mkdir(parents=True, exist_ok=True)
    cached.write_text(json.dumps([py, torch, cuda]))
    return BaseFacts(python=py, torch=torch, torch_cuda=cuda)


# --------------------------------------------------------------------------- resolving what to build

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


@dataclass(frozen=True)
class Built:
    spec: Spec
    image_id: str
    tags: tuple[str, ...]
    lock_file: Path
    lock_sha256: str
    lock_changed: bool = True  # False: the lock file already said exactly this and was left untouched
    from_lock: bool = False    # installed exactly the lock's versions


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


def _build_failure(e: CommandError, spec: Spec, *, pinned: bool = False) -> BuildError:
    missing = debian.missing_versions(e.tail) if pinned else []
    if missing:
        return PinsGone(f"the lock pins Debian packages the archive no longer has: {debian.sentence(missing)}; "
                        f"nothing was built and any previous image of {spec.tag} is kept. Rebuild with --update to "
                        f"take the archive's current versions (and rewrite the lock), or point "
                        f"KERNELLAB_DEBIAN_MIRROR at a snapshot that still has them.", missing)
    step = None
    for line in e.tail.splitlines():
        m = _STEP.match(line)
        if m:
            step = f"[{m.group(1)}] {m.group(2)[:120]}"
    where = f" at step {step}" if step else ""
    undated = re.search(r"Index (\S+) does not provide upload-time metadata", e.tail)
    if undated:
        return BuildError(f"building {spec.tag} failed{where}: the index {undated.group(1)} gives no upload times, "
                          f"which as_of {spec.as_of} needs (pip's --uploaded-prior-to); point index-url at PyPI or a "
                          f"mirror that passes upload times on, or drop as_of and pin the packages.")
    return BuildError(f"building {spec.tag} failed{where}; nothing was tagged and any previous image of that tag "
                      f"is kept. Last lines:\n{e.tail.rstrip()}")


class PinsGone(BuildError):
    """A build that follows a lock stopped because apt no longer has some of its pinned versions."""

    def __init__(self, message: str, missing: list[str]):
        super().__init__(message)
        self.missing = missing


def build(
    spec: Spec,
    *,
    matrix: Matrix | None = None,
    lock: Mode = "update",
    ca_certs: tuple[Path, ...] = (),
    wheelhouse: Path | None = None,
    pip_config: network.PipConfig | None = None,
    no_cache: bool = False,
    lock_dir: Path = LOCK_DIR,
    out: IO[str] = sys.stdout,
    engine: Engine | None = None,
    tag_target: bool = True,
) -> Built:
    """Build spec into an image, write its lock (only if it changed), then label and tag it (only now).

    lock: "update" resolves afresh; "strict" follows the lock or raises BuildError; "prefer" follows the
    lock when it fits and otherwise says why and resolves afresh (kernellab.image.locks). tag_target: also move
    kernellab:<target> to it (False: a second build made to compare with the first leaves the target where it is,
    for whoever runs it meanwhile)."""
    matrix = matrix or load()
    eng = resolve_engine(engine).require()
    base_ref, base_digest = ensure_base(spec, out=out, engine=eng)
    base_packages = debian_packages(eng, base_ref)
    followed = locks.choose(spec, lock, lock_dir, out)
    if followed:
        moved = locks.base_moved(followed, base_ref, base_digest, base_packages)
        if moved and debootstrap_cpu.suite(spec.base):  # made here: it cannot be pinned by digest
            if lock == "strict":
                raise BuildError(f"{moved}; nothing was built. Rebuild with --update to take the archive's current "
                                 f"packages (and rewrite the lock).")
            out.write(f"note: {moved}: resolving afresh; the lock will be rewritten.\n")
            followed = None
        elif moved:
            out.write(f"warning: {moved}; building FROM the locked digest\n")
    def attempt(following: dict[str, Any] | None) -> Built:
        return _build(spec, matrix, following, base_ref, base_digest, base_packages, ca_certs=ca_certs,
                      wheelhouse=wheelhouse, pip_config=pip_config, no_cache=no_cache, lock_dir=lock_dir, out=out,
                      eng=eng, tag_target=tag_target)

    try:
        return attempt(followed)
    except PinsGone as e:
        if lock != "prefer":
            raise
        out.write(f"note: the archive no longer has {debian.sentence(e.missing)}: resolving afresh; "
                  f"the lock will be rewritten.\n")
        return attempt(None)


def _build(spec: Spec, matrix: Matrix, lock: dict[str, Any] | None, base_ref: str, base_digest: str,
           base_packages: dict[str, str], *, ca_certs: tuple[Path, ...], wheelhouse: Path | None,
           pip_config: network.PipConfig | None, no_cache: bool, lock_dir: Path, out: IO[str], eng: Engine,
           tag_target: bool = True) -> Built:
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
    with tempfile.TemporaryDirectory(prefix="kl-build-") as tmp, eng.staging() as staging:
        ctx = Path(tmp) / "context"
        render.write_context(spec, matrix, ctx, locked=lock is not None, certs=ca_certs, requirements=requirements,
                             base_digest=lock["base"]["digest"] if lock else None, apt_pins=locks.apt_pins(lock))
        iidfile = Path(tmp) / "iid"
        with network.build_pip_conf(pip_config, wheelhouse, dated=bool(spec.as_of) and lock is None) as pipconf:
            argv, build_env = eng.build_argv(ctx, iidfile=iidfile, tags=[staging], secrets={"pipconf": pipconf},
                                             build_args=proxy_args, no_cache=no_cache)
            how = " from the lock" if lock else ""
            out.write(f"building {spec.tag} FROM {base_ref} with {eng.name}{how}\n")
            steps = BuildSteps(out)
            try:
                proc.run(argv, stream=True, out=steps, env={**build_env, **proxy_env})
            except CommandError as e:
                raise _build_failure(e, spec, pinned=bool(lock)) from None
            finally:
                steps.close()
        built_id = read_iid(iidfile)
        new_lock = locks.make(spec, base_ref=base_ref, base_digest=base_digest, base_packages=base_packages,
                              info=_envinfo(eng, built_id), archive=debian.mirror(matrix.debian))
        missing = sorted(set(lock["pip_freeze"]) - set(new_lock["pip_freeze"])) if lock else []
        if missing:  # (packages beyond the lock's are the venv's own, e.g. setuptools in a lock made before it was recorded)
            raise BuildError(f"the build from the lock did not reproduce its packages (missing: {', '.join(missing[:8])}); "
                             f"nothing was tagged.")
        digest = lock_digest(new_lock)
        tags = (spec.tag, *([f"kernellab:{spec.target}"] if spec.target and tag_target else []))
        # The lock is written (beside its final name) before the tags move, and named after.
        path = lock_path(spec, lock_dir)
        pending = locks.stage(new_lock, path)
        try:
            final_id = _label_and_tag(eng, staging, new_lock, digest, tags, Path(tmp))
        except BaseException:
            locks.discard(pending)
            raise
        locks.commit(pending, path)
    return Built(spec, final_id, tags, path, digest, pending is not None, lock is not None)


def debian_packages(eng: Engine, image: str) -> dict[str, str]:
    """The Debian packages in an image, {name: version}; {} when it has no dpkg."""
    r = proc.run(eng.probe_argv(image, ["-W", "-f", debian.DPKG_FORMAT], entrypoint="dpkg-query"), check=False)
    return debian.parse_packages(r.stdout.splitlines()) if r.ok else {}


def read_iid(iidfile: Path) -> str:
    """The image ID a build wrote, as "sha256:<hex>" (Podman writes bare hex)."""
    iid = iidfile.read_text().strip()
    return iid if iid.startswith("sha256:") else f"sha256:{iid}"


def _envinfo(eng: Engine, image: str) -> dict[str, Any]:
    """Describe the built image from inside (its venv's python, else python3)."""
    for python in ("python", "python3"):
        r = proc.run(eng.probe_argv(image, ["/tmp/kl-envinfo.py"], entrypoint=python,
                                    mounts=(f"{ENVINFO}:/tmp/kl-envinfo.py:ro",)), check=False)
        if r.ok:
            return json.loads(r.stdout)
    raise BuildError(f"the image was built but its Python could not describe it (for the lock): {r.stderr.strip()[-300:]}")


def _label_and_tag(eng: Engine, staging: str, lock: dict[str, Any], digest: str, tags: tuple[str, ...],
                   tmp: Path) -> str:
    """A last, metadata-only stage over the built image (named `staging`): the lock inside, its hash as a label;
    the final tags are set only here."""
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
    return read_iid(iid)


def image_for_target(name: str | None = None, engine: Engine | None = None, has_gpu: bool | None = None) -> Image:
    """The image of a named target (or the default target of this machine, or of one that has_gpu says), if it was
    built: inspected once, handed on as a value."""
    name = name or default_target(has_gpu)
    ref = f"kernellab:{name}"
    eng = resolve_engine(engine).require()
    found = eng.find_image(ref)
    if found is None:
        raise KernellabError(f"image {ref} is not built for {eng.name}; run `invoke build-image --target {name}` first.")
    return found


def default_target(has_gpu: bool | None = None) -> str:
    """The named target marked default_for "gpu" when this machine (or the one has_gpu speaks of) has an NVIDIA
    GPU, else for "cpu"."""
    from .. import gpu

    want = "gpu" if (gpu.host_gpus() if has_gpu is None else has_gpu) else "cpu"
    for name, t in load().targets.items():
        if t.default_for == want:
            return name
    raise KernellabError(f"no target in docker/targets.toml has default_for = \"{want}\"; add one.")
