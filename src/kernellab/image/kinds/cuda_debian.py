"""The cuda-debian kind: nvcc and the CUDA libraries from Debian's own `nvidia-cuda-toolkit` (`--toolkit debian`).

Needs no container registry and no NVIDIA site: the base is made here from Debian's archive (reproducibly,
kernellab.image.debian) and the toolkit comes from its non-free section, which many sites mirror. Which Debian
release ships which CUDA is data (matrix.toml `[cuda."X.Y".debian]`); PyTorch comes from PyPI when its
default build is for that CUDA (torch 2.5/2.6 for 12.4), else from PyTorch's index or the pip configuration.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from ...errors import ResolveError, UnfitError
from ..spec import Spec
from ..targets import DOCKER_DIR, Cuda, Gpu, Matrix, Os, vkey
from . import choose
from .base import Request
from .cuda_image import CudaKind
from .debootstrap_cpu import OsBase, suite


class CudaDebian(OsBase, CudaKind):
    name = "cuda-debian"
    toolkit = "debian"
    toolkit_help = "Debian's nvidia-cuda-toolkit"
    tag_suffix = "deb"

    def toolchain(self, matrix: Matrix, req: Request, cuda: Cuda, gpus: tuple[Gpu, ...]) -> tuple[Os, str, str | None]:
        releases = sorted({c.debian.os for c in matrix.cuda.values() if c.debian})
        if cuda.debian is None and req.os and req.os not in releases:
            raise UnfitError(f"--toolkit debian builds on the Debian release that ships the CUDA ({', '.join(releases)}), "
                             f"not {req.os}; drop the OS choice, or use --toolkit image or pip.")
        if cuda.debian is None:
            raise UnfitError(f"Debian's archive does not ship CUDA {cuda.version}: it ships {shipped(matrix)}; "
                               f"choose one of those, or --toolkit image or pip.")
        os_ = choose.os_(matrix, cuda.debian.os)
        if req.os and req.os != os_.key:
            raise UnfitError(f"Debian ships CUDA {cuda.version} in {os_.key} ({os_.codename}) only, not {req.os}; "
                               f"drop the OS choice or pick the CUDA version {req.os} ships.")
        if req.base and suite(req.base) != suite(os_.image):
            raise ResolveError(f"--toolkit debian builds on {os_.image}, the release that ships CUDA {cuda.version}; "
                               f"drop the base choice.")
        return os_, os_.image, None

    def cuda_home(self, cuda: Cuda, python: str) -> str:
        return "/usr"  # Debian's layout: /usr/bin/nvcc, /usr/include, /usr/lib/<triplet>

    def nsys(self, matrix: Matrix, cuda: Cuda) -> str | None:
        return cuda.debian.nsys if cuda.debian else None

    def no_nsys(self, cuda: Cuda) -> str:
        return f"none: docker/matrix.toml names no Debian nsight-systems for CUDA {cuda.version} ([cuda.\"{cuda.version}\".debian] nsys)"

    def context(self, spec: Spec, matrix: Matrix) -> dict[str, Any]:
        ctx = super().context(spec, matrix)
        cuda = matrix.cuda[str(spec.cuda)]
        assert cuda.debian is not None
        # Nsight Systems' report importer links libssh and libpfm: installed (and so locked) with the system packages.
        ctx["apt_packages"] = [*ctx["apt_packages"], f"nvidia-cuda-toolkit={cuda.debian.package}",
                               *(NSYS_APT if spec.nsys else ())]
        ctx["toolkit_package"] = cuda.debian.package
        return ctx

    def context_files(self, spec: Spec) -> dict[str, Path]:
        return {NSYS_SCRIPT.name: NSYS_SCRIPT} if spec.nsys else {}


#: Unpacks Debian's Nsight Systems into one prefix (the Dockerfile runs it; its header says why not apt-get install).
NSYS_SCRIPT = DOCKER_DIR / "nsight-systems.sh"
#: What its report importer (QdstrmImporter) needs from the system.
NSYS_APT = ("libssh-4", "libpfm4")


def shipped(matrix: Matrix) -> str:
    """"CUDA 11.8 (debian12, bookworm) and 12.4 (debian13, trixie)": what the matrix knows Debian ships."""
    found = [f"{c.version} ({c.debian.os}, {matrix.os[c.debian.os].codename})"
             for c in sorted(matrix.cuda.values(), key=lambda c: vkey(c.version)) if c.debian]
    return "CUDA " + (" and ".join([", ".join(found[:-1]), found[-1]]) if len(found) > 1 else "".join(found) or "none")


KIND = CudaDebian()
