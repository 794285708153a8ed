"""Tasks: build-image, render, base-image."""
from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from invoke import Exit

from ..errors import KernellabError, UsageError
from ..image import builder, network, render, targets
from ..image.locks import Mode
from ..image.resolve import resolve
from . import ENGINE_HELP, configured_target, task

BUILD_HELP = {
    "target": "a named target from docker/targets.toml (default: this machine's: GPU found -> gpu, else cpu)",
    "cuda": "CUDA toolkit version, e.g. 12.1",
    "gpu": "target GPU(s): name, alias or capability (a100, sm_90, 8.6); comma-separated; `cpu` for CPU-only",
    "torch": "PyTorch version (default: newest with a wheel for this CUDA)",
    "python": "Python version (default: the OS's own if PyTorch supports it)",
    "llvm": "LLVM/clang version, or none",
    "gcc": "gcc version (must not exceed the CUDA maximum)",
    "ubuntu": "Ubuntu release of the nvidia/cuda base, e.g. 22.04",
    "toolkit": "where CUDA comes from: image (nvidia/cuda base) or pip (PyPI wheels, CUDA 13)",
    "as_of": "resolve pip packages not pinned as of this day, YYYY-MM-DD (the paper's time); recorded in the lock",
    "base_image": "build on an image that already has PyTorch (NGC, a site image): verified, not reinstalled",
    "dry_run": "print the resolved spec and the Dockerfile; build nothing",
    "locked": "build exactly from docker/locks/<target>.json, or stop saying what no longer fits",
    "update": "resolve afresh, ignoring the lock, and rewrite it (default: follow the lock when it fits)",
    "ca_cert": "extra CA certificate (PEM) to trust in the build; repeatable",
    "no_host_certs": "do not add the host's /usr/local/share/ca-certificates/*.crt",
    "wheelhouse": "a folder of wheels: install offline from it only",
    "no_cache": "build without the layer cache",
    "engine": ENGINE_HELP,
}


def _spec(target, cuda, gpu, torch, python, llvm, gcc, ubuntu, toolkit, base_image, configured=None, as_of=None):
    flags = dict(cuda=cuda, gpu=gpu, torch=torch, python=python, llvm=llvm, gcc=gcc, ubuntu=ubuntu, toolkit=toolkit)
    if not any(v for v in flags.values()) and not base_image:
        # No versions asked for: the named target, else invoke.yaml's kernellab.target, else this machine's.
        target = target or configured or builder.default_target()
    return builder.resolve_request(target=target, base_image=base_image, as_of=as_of, **flags)


@task(help=BUILD_HELP, iterable=["gpu", "ca_cert"], auto_shortflags=False)
def build_image(c, target=None, cuda=None, gpu=None, torch=None, python=None, llvm=None, gcc=None, ubuntu=None,
                toolkit=None, as_of=None, base_image=None, dry_run=False, locked=False, update=False, ca_cert=None,
                no_host_certs=False, wheelhouse=None, no_cache=False, engine=None):
    """Resolve, validate and build a pinned image (tags it only on success); follows the lock when it fits."""
    if locked and update:
        raise UsageError("--locked follows the lock and --update ignores it; choose one.")
    spec = _spec(target, cuda, gpu, torch, python, llvm, gcc, ubuntu, toolkit, base_image,
                 configured=configured_target(c), as_of=as_of)
    print("resolved:\n" + spec.summary())
    if dry_run:
        print("\n" + render.dockerfile(spec, targets.load(), locked=locked))
        return
    certs = network.ca_certificates(ca_cert or [], host=not no_host_certs)
    mode: Mode = "strict" if locked else "update" if update else "prefer"
    built = builder.build(spec, lock=mode, ca_certs=certs, no_cache=no_cache,
                         wheelhouse=Path(wheelhouse) if wheelhouse else None)
    print(f"\nbuilt {built.image_id[:19]} tagged {', '.join(built.tags)}")
    state = "written" if built.lock_changed else "unchanged"
    print(f"lock  {built.lock_file} (sha256 {built.lock_sha256[:12]}, {state})")


@task(help={"check": "only check that the committed Dockerfiles match the matrix; exit 1 if not"})
def render_dockerfiles(c, check=False):
    """Write docker/rendered/<target>/ for every target marked rendered = true."""
    stale = write_rendered(check=check)
    if check and stale:
        raise KernellabError(f"rendered Dockerfiles are out of date: {', '.join(stale)}; run `invoke render-dockerfiles`.")
    print("up to date" if check else f"rendered {len(stale)} changed file(s) under docker/rendered/")


@task
def check_matrix(c):
    """Compare docker/matrix.toml's PyTorch releases with what PyPI publishes (Pythons, triton pins, newer releases)."""
    from ..image import published

    code = published.main()
    if code:
        raise Exit(code=code)


def write_rendered(check: bool = False) -> list[str]:
    """Render every target marked rendered = true; return the files that differ (and, unless check, rewrite them)."""
    matrix = targets.load()
    stale = []
    for name, t in matrix.targets.items():
        if not t.rendered:
            continue
        spec = resolve(matrix, target=name)  # the matrix's own torch index, never the environment's
        dest = render.RENDERED_DIR / name
        with tempfile.TemporaryDirectory() as tmp:
            render.write_context(spec, matrix, Path(tmp))
            for rel in render.context_files(spec):
                new = (Path(tmp) / rel).read_text()
                old = (dest / rel).read_text() if (dest / rel).exists() else None
                if new != old:
                    stale.append(f"{name}/{rel}")
                    if not check:
                        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
                        (dest / rel).write_text(new)
    return stale


@task(help={"suite": "Debian suite (default bookworm; trixie for the debian13 targets)", "engine": ENGINE_HELP})
def base_image(c, suite="bookworm", engine=None):
    """Make a local Debian base image with mmdebstrap: no registry needed, the same image ID for the same packages."""
    tag = builder.make_debootstrap_base(suite, out=sys.stdout)
    print(f"made {tag}")


@task(help={"a": "an image (tag or ID)", "b": "another image", "engine": ENGINE_HELP})
def compare_images(c, a, b, engine=None):
    """Compare two images file by file (content, mode, owner; never times): what two builds really differ in."""
    from ..engine import current
    from ..image import contents

    eng = current().require()
    for ref in (a, b):
        if not eng.exists(ref):
            raise KernellabError(f"no image {ref} in {eng.name}; `invoke build-image` or `invoke import-image` it first.")
    result = contents.compare(contents.files(eng, a), contents.files(eng, b))
    print(result.summary(a, b))
    print("the same files" if result.identical else "they differ")
