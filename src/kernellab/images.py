"""Build images: base images, a BuildKit build through the docker CLI, the lock, labels, atomic tags.

The Python SDK has no BuildKit, so builds shell out to the docker CLI; inspection uses the SDK.
An image is tagged only after the build and the lock succeeded: a failed or interrupted build
leaves no half-tagged image, and the previous image of that tag stays.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
import shutil
import socket
import sys
import tempfile
import urllib.parse
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from . import ROOT, network, proc, render
from .errors import BuildError, CommandError, DockerError, KernellabError, ResolveError
from .resolve import BaseFacts, Spec, resolve
from .targets import DOCKER_DIR, Matrix, load

LOCK_DIR = DOCKER_DIR / "locks"
ENVINFO = Path(__file__).with_name("envinfo.py")


# --------------------------------------------------------------------------- the engine

def engine() -> Any:
    """A connected docker SDK client, or DockerError saying how to get an engine."""
    try:
        import docker  # noqa: PLC0415
    except ImportError:
        raise DockerError("the docker Python package is missing; run `make setup` (or `pip install docker`).") from None
    try:
        client = docker.from_env(timeout=120)
        client.ping()
        return client
    except Exception as e:
        where = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
        raise DockerError(f"cannot reach a Docker engine at {where} ({type(e).__name__}); start one "
                          f"(`make engine`, or `sudo systemctl start docker`) and check with `invoke doctor`.") from None


def builder() -> list[str]:
    """The docker CLI to build with BuildKit: buildx if present, else a client with built-in BuildKit."""
    candidates = list(dict.fromkeys(p for p in (shutil.which("docker"), "/usr/bin/docker") if p and os.path.exists(p)))
    if not candidates:
        raise DockerError("the docker CLI is not installed; run `make engine` or install docker.io.")
    for cli in candidates:
        if proc.run([cli, "buildx", "version"], check=False).ok:
            return [cli, "buildx", "build", "--load"]
    for cli in candidates:
        version = proc.run([cli, "version", "--format", "{{.Client.Version}}"], check=False).stdout.strip()
        major = re.match(r"(\d+)", version)
        if major and int(major.group(1)) < 23:  # before 23, `docker build` had BuildKit built in
            return [cli, "build"]
    raise DockerError("no docker CLI here can build with BuildKit: install the buildx plugin "
                      "(docker-buildx) or Debian's docker.io client.")


def image_exists(ref: str) -> bool:
    return proc.run(["docker", "image", "inspect", ref], check=False).ok


def image_id(ref: str) -> str:
    return proc.run(["docker", "image", "inspect", "--format", "{{.Id}}", ref]).stdout.strip()


def labels(ref: str) -> dict[str, str]:
    out = proc.run(["docker", "image", "inspect", "--format", "{{json .Config.Labels}}", ref]).stdout
    return json.loads(out) or {}


# --------------------------------------------------------------------------- base images

def make_debootstrap_base(suite: str, *, out: IO[str] = sys.stdout) -> str:
    """Make `kernellab-base:debian-<suite>` from Debian's archive with debootstrap (needs root)."""
    tag = render.base_tag(f"debootstrap:{suite}")
    if shutil.which("debootstrap") is None:
        raise BuildError(f"the base image {tag} is made with debootstrap, which is not installed; "
                         f"`sudo apt-get install debootstrap` (or `make setup`) and try again.")
    if os.geteuid() != 0:
        raise BuildError(f"making the base image {tag} with debootstrap needs root; run "
                         f"`sudo .venv/bin/invoke base-image` once.")
    mirror = os.environ.get("KERNELLAB_DEBIAN_MIRROR", "http://deb.debian.org/debian")
    with tempfile.TemporaryDirectory(prefix="kl-debootstrap-") as tmp:
        root = Path(tmp) / "root"
        out.write(f"making base image {tag} with debootstrap {suite} from {mirror} (about 30 s)\n")
        proc.run(["debootstrap", "--variant=minbase", suite, str(root), mirror], stream=True, out=out,
                 hint="check that Debian's archive is reachable (or set KERNELLAB_DEBIAN_MIRROR)")
        with proc.pipe_to(["docker", "import", "-", tag]) as pipe:
            with proc.pipe_from(["tar", "-C", str(root), "--numeric-owner", "-c", "."]) as tar:
                shutil.copyfileobj(tar, pipe.stream, 1 << 20)
    return tag


def ensure_base(spec: Spec, *, out: IO[str] = sys.stdout) -> tuple[str, str]:
    """Make sure spec's base image is present; return (reference, digest or image ID)."""
    if spec.base.startswith("debootstrap:"):
        ref = render.base_tag(spec.base)
        if not image_exists(ref):
            make_debootstrap_base(spec.base.split(":", 1)[1], out=out)
        return ref, image_id(ref)
    ref = spec.base
    if not image_exists(ref):
        out.write(f"pulling base image {ref}\n")
        try:
            proc.run(["docker", "pull", ref], stream=True, out=out)
        except CommandError as e:
            raise BuildError(
                f"base image {ref} is not here and could not be pulled ({e.tail.strip().splitlines()[-1] if e.tail.strip() else 'no output'}); "
                f"on a machine that can pull it run `docker pull {ref}` and `invoke export-image {ref}`, "
                f"then `invoke import-image DIR` here.") from None
    digests = json.loads(proc.run(["docker", "image", "inspect", "--format", "{{json .RepoDigests}}", ref]).stdout) or []
    return ref, (digests[0] if digests else image_id(ref))


def probe_base(image: str) -> BaseFacts:
    """Find the Python and PyTorch a --base-image already has (runs it once, without network)."""
    if not image_exists(image):
        raise ResolveError(f"base image `{image}` is not present; `docker pull {image}`, `docker load`, or "
                           f"`invoke import-image DIR` first.")
    code = ("import json, platform\ntry:\n import torch; t, c = torch.__version__, torch.version.cuda\n"
            "except Exception:\n t = c = None\nprint(json.dumps([platform.python_version(), t, c]))")
    r = proc.run(["docker", "run", "--rm", "--network", "none", "--entrypoint", "python3", image, "-c", code],
                 check=False)
    if not r.ok:
        raise ResolveError(f"base image `{image}` has no working python3 ({r.stderr.strip()[-200:]}); "
                           f"kernellab needs python3 with torch in a --base-image.")
    py, torch, cuda = json.loads(r.stdout.strip().splitlines()[-1])
    return BaseFacts(python=py, torch=torch, torch_cuda=cuda)


# --------------------------------------------------------------------------- resolving what to build

def resolve_request(*, target: str | None = None, base_image: str | None = None, matrix: Matrix | None = None,
                    **flags: Any) -> Spec:
    """resolve() plus what needs Docker: facts about a --base-image. Honours KERNELLAB_TORCH_INDEX."""
    matrix = matrix or load()
    base = base_image or (matrix.targets.get(target or "", {}).get("base"))
    facts = probe_base(base) if base and not str(base).startswith("debootstrap:") else None
    return resolve(matrix, target=target, base_image=base_image, base_facts=facts,
                   torch_index=os.environ.get("KERNELLAB_TORCH_INDEX"), **flags)


def torch_index_for_builds(matrix: Matrix) -> tuple[str | None, str]:
    """KERNELLAB_TORCH_INDEX if set; else the matrix's index, or none when its host is unreachable.

    pip retries an unreachable index for every package (~10 s each); behind a closed network the
    pip configuration (a mirror, find-links) has to provide PyTorch anyway.
    """
    if "KERNELLAB_TORCH_INDEX" in os.environ:
        return os.environ["KERNELLAB_TORCH_INDEX"], ""
    if not matrix.torch_index or any(os.environ.get(v) for v in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY")):
        return None, ""
    host = urllib.parse.urlparse(matrix.torch_index.replace("{variant}", "cpu")).hostname or ""
    try:
        socket.create_connection((host, 443), timeout=3).close()
        return None, ""
    except OSError:
        return "", (f"{host} is unreachable: PyTorch must come from your pip configuration "
                    f"(set KERNELLAB_TORCH_INDEX to a mirror to choose)")


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
        lock["base"]["digest"], lock["pip_freeze"]  # noqa: B018 - the keys a locked build needs
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
) -> Built:
    """Build spec into an image, write its lock, then label and tag it (only now)."""
    matrix = matrix or load()
    engine()
    base_ref, base_digest = ensure_base(spec, out=out)
    lock = read_lock(spec, lock_dir) if locked else None
    if lock and lock["base"]["digest"] != base_digest:
        out.write(f"warning: base image {base_ref} is not the one locked ({lock['base']['digest'][:19]}...)\n")
    requirements = "\n".join(lock["pip_freeze"]) + "\n" if lock else None
    cli = builder()
    proxy_args, proxy_env = network.proxy_build_args()
    if spec.torch_index and "KERNELLAB_TORCH_INDEX" not in os.environ:
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
            argv = [*cli, "--network", "host", "--progress", "plain", "--iidfile", str(iidfile),
                    "--secret", f"id=pipconf,src={pipconf}", *proxy_args,
                    *(["--no-cache"] if no_cache else []), str(ctx)]
            out.write(f"building {spec.tag} FROM {base_ref}\n")
            try:
                proc.run(argv, stream=True, out=out, env={"DOCKER_BUILDKIT": "1", **proxy_env})
            except CommandError as e:
                raise _build_failure(e, spec) from None
        built_id = iidfile.read_text().strip()
        info = _envinfo(built_id)
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
            final_id = _label_and_tag(cli, built_id, new_lock, digest, tags, Path(tmp))
        except BaseException:
            pending.unlink(missing_ok=True)
            raise
        os.replace(pending, path)
    return Built(spec, final_id, tags, path, digest)


def _envinfo(image: str) -> dict[str, Any]:
    """Describe the built image from inside (its venv's python, else python3)."""
    for python in ("python", "python3"):
        r = proc.run(["docker", "run", "--rm", "--network", "none", "-v", f"{ENVINFO}:/tmp/kl-envinfo.py:ro",
                      "--entrypoint", python, image, "/tmp/kl-envinfo.py"], check=False)
        if r.ok:
            return json.loads(r.stdout)
    raise BuildError(f"the image was built but its Python could not describe it (for the lock): {r.stderr.strip()[-300:]}")


def _label_and_tag(cli: list[str], built_id: str, lock: dict[str, Any], digest: str, tags: tuple[str, ...],
                   tmp: Path) -> str:
    """A last, metadata-only stage: the lock inside, its hash as a label; tags are set only here."""
    staging = f"kernellab-staging:{uuid.uuid4().hex[:12]}"
    proc.run(["docker", "tag", built_id, staging])
    try:
        ctx = tmp / "final"
        ctx.mkdir()
        (ctx / "lock.json").write_text(json.dumps(lock, indent=2, sort_keys=True) + "\n")
        (ctx / "Dockerfile").write_text(
            f"FROM {staging}\nCOPY lock.json /etc/kernellab/lock.json\nLABEL kernellab.lock-sha256=\"{digest}\"\n")
        iid = tmp / "final.iid"
        argv = [*cli, "--network", "none", "--progress", "plain", "--iidfile", str(iid)]
        for t in tags:
            argv += ["-t", t]
        try:
            proc.run([*argv, str(ctx)], env={"DOCKER_BUILDKIT": "1"})
        except CommandError as e:
            raise BuildError(f"labelling the built image failed; nothing was tagged. Last lines:\n{e.tail}") from None
        return iid.read_text().strip()
    finally:
        proc.run(["docker", "rmi", "--no-prune", staging], check=False)


def image_for_target(name: str | None = None) -> str:
    """The image tag for a named target (or the default target of this machine), if it was built."""
    name = name or default_target()
    ref = f"kernellab:{name}"
    if not image_exists(ref):
        raise KernellabError(f"image {ref} is not built; run `invoke build-image --target {name}` first.")
    return ref


def default_target() -> str:
    """The named target marked default_for "gpu" when this machine has an NVIDIA GPU, else for "cpu"."""
    from . import gpu  # noqa: PLC0415

    want = "gpu" if gpu.host_gpus() else "cpu"
    for name, t in load().targets.items():
        if t.get("default_for") == want:
            return name
    raise KernellabError(f"no target in docker/targets.toml has default_for = \"{want}\"; add one.")
