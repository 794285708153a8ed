"""Render a Dockerfile (and its small build-context files) from a resolved Spec."""
from __future__ import annotations

import json
import shlex
import shutil
from pathlib import Path

import jinja2

from .resolve import Spec
from .targets import DOCKER_DIR, Matrix

RENDERED_DIR = DOCKER_DIR / "rendered"
CERTS_README = "Extra CA certificates (*.crt) put here are trusted inside the image.\n"


def dockerfile(spec: Spec, matrix: Matrix, *, locked: bool = False, base_digest: str | None = None) -> str:
    """The Dockerfile text for spec. With locked, pip installs exactly the lock's requirements."""
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(DOCKER_DIR)), undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True, autoescape=False,
    )
    env.filters["sh"] = shlex.quote
    os_ = matrix.os.get(spec.os) if spec.os else None
    from_ref = spec.base
    if spec.base.startswith("debootstrap:"):
        from_ref = base_tag(spec.base)
    if base_digest and base_digest.startswith(from_ref.split(":")[0] + "@"):
        from_ref = base_digest
    ctx = dict(
        spec=spec, os=os_, from_ref=from_ref, locked=locked, torch_index=public_torch_index(spec, matrix),
        title=spec.description or _title(spec),
        apt_packages=_apt(spec, os_) if os_ else [],
        python_ppa=bool(os_ and spec.python != os_.python),
        llvm_apt=bool(os_ and spec.llvm and spec.llvm not in os_.llvm),
        pip_packages=_pip(spec),
    )
    return env.get_template("Dockerfile.j2").render(**ctx)


def public_torch_index(spec: Spec, matrix: Matrix) -> str | None:
    """The torch index to write into the Dockerfile: only the matrix's public one.

    Any other index (a mirror set by KERNELLAB_TORCH_INDEX, maybe with credentials) reaches the
    build through the secret pip.conf instead (see images.build), never through a layer.
    """
    if spec.torch_index and spec.torch_index == matrix.torch_index.replace("{variant}", spec.torch_variant):
        return spec.torch_index
    return None


def base_tag(base: str) -> str:
    """The local image name for a `debootstrap:<suite>` base."""
    return "kernellab-base:debian-" + base.split(":", 1)[1]


def _title(spec: Spec) -> str:
    if spec.kind == "cpu":
        return f"CPU PyTorch {spec.torch}, Python {spec.python}"
    return f"CUDA {spec.cuda_full}, PyTorch {spec.torch}, Python {spec.python}, for {', '.join(spec.gpus)}"


def _apt(spec: Spec, os_) -> list[str]:
    pkgs = list(spec.image_apt) + [f"gcc-{spec.gcc}", f"g++-{spec.gcc}"]
    if spec.python == os_.python:
        pkgs += [f"python{spec.python}", f"python{spec.python}-venv", f"python{spec.python}-dev"]
    if spec.llvm and spec.llvm in os_.llvm:
        pkgs += [f"clang-{spec.llvm}", f"lld-{spec.llvm}", f"llvm-{spec.llvm}-dev"]
    pkgs += list(spec.extra_apt)
    return list(dict.fromkeys(pkgs))


def _pip(spec: Spec) -> list[str]:
    return [spec.torch_requirement, *spec.image_pip, *spec.extra_pip]


def write_context(spec: Spec, matrix: Matrix, folder: Path, *, locked: bool = False,
                  base_digest: str | None = None, certs: tuple[Path, ...] = (),
                  requirements: str | None = None) -> Path:
    """Write Dockerfile, kernellab/spec.json, certs/ (and lock/requirements.txt) into folder."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "Dockerfile").write_text(dockerfile(spec, matrix, locked=locked, base_digest=base_digest))
    (folder / "kernellab").mkdir(exist_ok=True)
    (folder / "kernellab" / "spec.json").write_text(json.dumps(spec.to_dict(), indent=2, sort_keys=True) + "\n")
    (folder / "certs").mkdir(exist_ok=True)
    (folder / "certs" / "README").write_text(CERTS_README)
    for i, cert in enumerate(certs):
        shutil.copyfile(cert, folder / "certs" / f"{i:02d}-{cert.stem}.crt")
    if requirements is not None:
        (folder / "lock").mkdir(exist_ok=True)
        (folder / "lock" / "requirements.txt").write_text(requirements)
    return folder / "Dockerfile"
