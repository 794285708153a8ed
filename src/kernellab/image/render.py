"""Render a Dockerfile (and its small build-context files) from a resolved Spec.

The spec's kind (kernellab.image.kinds) gives the template (docker/kinds/<kind>.j2, which extends
docker/Dockerfile.j2), the FROM reference, the title and whatever else its template needs.
"""
from __future__ import annotations

import json
import shlex
import shutil
from pathlib import Path

import jinja2

from . import kinds
from .kinds import torch_index
from .spec import Spec
from .targets import DOCKER_DIR, Matrix

RENDERED_DIR = DOCKER_DIR / "rendered"
CERTS_README = "Extra CA certificates (*.crt) put here are trusted inside the image.\n"


def dockerfile(spec: Spec, matrix: Matrix, *, locked: bool = False, base_digest: str | None = None,
               apt_pins: list[str] | None = None) -> str:
    """The Dockerfile text for spec. With locked, pip installs exactly the lock's requirements, and apt
    the lock's `name=version`s (apt_pins) where every package comes from the OS archive."""
    kind = kinds.get(spec.kind)
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(list(dict.fromkeys([str(DOCKER_DIR), str(kind.template_dir)]))),
        undefined=jinja2.StrictUndefined, keep_trailing_newline=True, autoescape=False,
    )
    env.filters["sh"] = shlex.quote
    from_ref = kind.from_ref(spec)
    if base_digest and base_digest.startswith(from_ref.split(":")[0] + "@"):
        from_ref = base_digest
    ctx: dict = dict(
        spec=spec, from_ref=from_ref, locked=locked, torch_index=public_torch_index(spec, matrix),
        title=spec.description or kind.title(spec), **kind.context(spec, matrix),
    )
    # Pins need every package in one apt step: not with a PPA or apt.llvm.org added later.
    ctx["apt_pins"] = apt_pins if locked and apt_pins and not ctx.get("python_ppa") and not ctx.get("llvm_apt") else None
    return env.get_template(kind.template).render(**ctx)


def public_torch_index(spec: Spec, matrix: Matrix) -> str | None:
    """The torch index written into the Dockerfile (kinds.torch_index.public_url decides)."""
    return torch_index.public_url(spec, matrix)


def context_files(spec: Spec) -> tuple[str, ...]:
    """The files of a build context that a rendered folder keeps (docker/rendered/NAME/): what the kind adds too."""
    return ("Dockerfile", "kernellab/spec.json", "certs/README", *kinds.get(spec.kind).context_files(spec))


def write_context(spec: Spec, matrix: Matrix, folder: Path, *, locked: bool = False,
                  base_digest: str | None = None, certs: tuple[Path, ...] = (),
                  requirements: str | None = None, apt_pins: list[str] | None = None) -> Path:
    """Write Dockerfile, kernellab/spec.json, certs/, what the kind's template reads (docker/nsight-systems.sh for a
    cuda-debian image with nsys) and lock/requirements.txt into folder."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "Dockerfile").write_text(dockerfile(spec, matrix, locked=locked, base_digest=base_digest,
                                                  apt_pins=apt_pins))
    (folder / "kernellab").mkdir(exist_ok=True)
    (folder / "kernellab" / "spec.json").write_text(json.dumps(spec.to_dict(), indent=2, sort_keys=True) + "\n")
    (folder / "certs").mkdir(exist_ok=True)
    (folder / "certs" / "README").write_text(CERTS_README)
    for i, cert in enumerate(certs):
        shutil.copyfile(cert, folder / "certs" / f"{i:02d}-{cert.stem}.crt")
    for name, source in kinds.get(spec.kind).context_files(spec).items():
        shutil.copyfile(source, folder / name)
    if requirements is not None:
        (folder / "lock").mkdir(exist_ok=True)
        (folder / "lock" / "requirements.txt").write_text(requirements)
    return folder / "Dockerfile"
