"""The cpu kind: CPU-only PyTorch on a plain OS image, by default Debian made here (mmdebstrap, reproducible).

This module also owns `debootstrap:<suite>` base references (the only place they are parsed) and
`OsBase`, the base handling of every kind built on a plain OS image: made locally, or pulled.
"""
from __future__ import annotations

import shutil
from typing import IO

from ...engine import Engine
from ...errors import ResolveError
from .. import debian
from ..spec import Spec
from ..targets import Matrix, load
from . import choose
from .base import BaseStatus, Kind, Request, py_part
from .torch_index import index_url

PREFIX = "debootstrap:"
#: The OS base when a request names none (a matrix [os] entry must use it).
DEFAULT_BASE = PREFIX + "bookworm"


def suite(ref: str | None) -> str | None:
    """The Debian suite of a `debootstrap:<suite>` base reference; None for any other reference."""
    if ref and ref.startswith(PREFIX):
        return ref[len(PREFIX):]
    return None


def local_tag(suite: str) -> str:
    """The local image a debootstrap base becomes."""
    return "kernellab-base:debian-" + suite


def make_base(suite: str, *, engine: Engine, out: IO[str]) -> str:
    """Make `kernellab-base:debian-<suite>` from Debian's archive, the same bit for bit for the same
    package versions (kernellab.image.debian; needs root)."""
    tag = local_tag(suite)
    debian.make_base(suite, tag, load().debian, engine=engine, out=out)
    return tag


class OsBase(Kind):
    """A kind built on a plain OS image: `debootstrap:<suite>` is made here, any other is pulled."""

    def from_ref(self, spec: Spec) -> str:
        s = suite(spec.base)
        return local_tag(s) if s else spec.base

    def ensure_base(self, spec: Spec, *, engine: Engine, out: IO[str]) -> tuple[str, str]:
        s = suite(spec.base)
        if s is None:
            return super().ensure_base(spec, engine=engine, out=out)
        ref = local_tag(s)
        if not engine.exists(ref):
            make_base(s, engine=engine, out=out)
        return ref, engine.image_id(ref)

    def base_status(self, spec: Spec, engine: Engine) -> BaseStatus:
        if suite(spec.base) is None:
            return super().base_status(spec, engine)
        ref = self.from_ref(spec)
        if engine.exists(ref):
            return BaseStatus("ok", f"{ref} is present")
        if shutil.which("mmdebstrap"):
            return BaseStatus("ok", f"{ref} will be made with mmdebstrap on first build")
        return BaseStatus("fail", f"{ref} is missing and mmdebstrap is not installed",
                          "`apt-get install mmdebstrap` (make setup does)")


class DebootstrapCpu(OsBase):
    name = "cpu"

    def claims(self, req: Request) -> bool:
        return req.gpus is None

    def resolve(self, matrix: Matrix, req: Request) -> Spec:
        if req.cuda:
            raise ResolveError("`--gpu cpu` builds a CPU-only image; drop --cuda, or name a GPU.")
        os_ = choose.os_(matrix, req.os or choose.os_for_base(matrix, req.base or DEFAULT_BASE))
        # torch = "none": a CPU image for a system that does not use PyTorch (TVM, say): Python and the compilers.
        torch = None if choose.no_torch(req.torch) else choose.torch_for(matrix, None, req.torch, "CPU")[0]
        py = choose.python(os_, torch, req.python)
        warnings: list[str] = []
        return Spec(
            kind=self.name, target=req.target, gpus=("cpu",), ccs=(), cuda=None, cuda_full=None, cudnn=None,
            min_driver=None, torch=torch.version if torch else None,
            torch_variant="cpu" if torch else choose.NO_TORCH, python=py, os=os_.key,
            base=req.base or os_.image, gcc=choose.gcc(os_, None, req.gcc),
            llvm=choose.llvm(matrix, os_, None, req.llvm, warnings, req.llvm_role), triton=None, pip_toolkit=None,
            cuda_home=None, torch_index=index_url(matrix.torch_index, torch, "cpu") if torch else None,
            torch_requirement=choose.torch_requirement(torch, "cpu") if torch else "", warnings=tuple(warnings),
            **req.extras(matrix, torch),
        )

    def tag_parts(self, spec: Spec) -> list[str]:
        return ["cpu", f"torch{spec.torch}" if spec.torch else "notorch", py_part(spec)]

    def title(self, spec: Spec) -> str:
        if not spec.torch:
            return f"CPU, no PyTorch, Python {spec.python}" + (f", LLVM {spec.llvm}" if spec.llvm else "")
        return f"CPU PyTorch {spec.torch}, Python {spec.python}"


KIND = DebootstrapCpu()
