"""The cuda-pip kind: nvcc and the CUDA toolkit from PyPI wheels on a plain OS image (`--toolkit pip`).

Needs no NVIDIA registry and survives the deletion of nvidia/cuda tags; the OS base is the same as
the cpu kind's (by default Debian made here with debootstrap).
"""
from __future__ import annotations

from ...errors import UnfitError
from ..targets import Cuda, Gpu, Matrix, Os
from . import choose
from .base import Request
from .cuda_image import CudaKind
from .debootstrap_cpu import DEFAULT_BASE, OsBase


class CudaPip(OsBase, CudaKind):
    name = "cuda-pip"
    toolkit = "pip"
    toolkit_help = "CUDA from PyPI"
    tag_suffix = "pip"

    def toolchain(self, matrix: Matrix, req: Request, cuda: Cuda, gpus: tuple[Gpu, ...]) -> tuple[Os, str, str | None]:
        if not cuda.pip:
            able = [c.version for c in matrix.cuda.values() if c.pip]
            raise UnfitError(f"CUDA {cuda.version} cannot come from PyPI (its nvcc wheels lack the compiler); "
                               f"PyPI toolkits exist for CUDA {choose.known(able)}, or use the nvidia/cuda base image.")
        os_ = choose.os_(matrix, req.os or choose.os_for_base(matrix, req.base or DEFAULT_BASE))
        return os_, req.base or os_.image, None

    def pip_toolkit(self, cuda: Cuda) -> str | None:
        return cuda.pip

    def cuda_home(self, cuda: Cuda, python: str) -> str:
        return f"/opt/venv/lib/python{python}/site-packages/{cuda.pip_home}"


KIND = CudaPip()
