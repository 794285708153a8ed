"""The cuda-image kind: CUDA, cuDNN and nvcc from an nvidia/cuda devel image (`--toolkit image`, the default).

`CudaKind` is what every CUDA kind shares: the toolkit and its arch checks, PyTorch for it, Python,
gcc within CUDA's limit, LLVM; a subclass says where the toolkit and the OS come from.
"""
from __future__ import annotations

import dataclasses
import re

from ...errors import ResolveError, UnfitError
from ..spec import Spec
from ..targets import Cuda, Gpu, Matrix, Os, vkey
from . import choose, defaults
from .base import Kind, Request, py_part, sm_part
from .torch_index import index_url


class CudaKind(Kind):
    """A GPU image with a CUDA toolkit; subclasses choose the OS, the base and CUDA_HOME."""

    #: Added to the tag's "cuXYZ" part.
    tag_suffix = ""

    def claims(self, req: Request) -> bool:
        return req.gpus is not None and (req.toolkit or "image") == self.toolkit

    def toolchain(self, matrix: Matrix, req: Request, cuda: Cuda, gpus: tuple[Gpu, ...]) -> tuple[Os, str, str | None]:
        """(OS, base image reference, cuDNN version or None) for this CUDA."""
        raise NotImplementedError

    def oses(self, matrix: Matrix, req: Request, cuda: Cuda, chosen: Os) -> list[Os]:
        """The OSes this request could be built on with this CUDA (the one chosen, unless the kind chooses among
        several): a Python refusal names the nearest one of theirs."""
        return [chosen]

    def pip_toolkit(self, cuda: Cuda) -> str | None:
        return None

    def cuda_home(self, cuda: Cuda, python: str) -> str:
        return "/usr/local/cuda"

    def resolve(self, matrix: Matrix, req: Request) -> Spec:
        """The spec for req. Without --cuda, the CUDA is the first in defaults.cudas' order (a pinned PyTorch's own
        wheels first) with which the rest of the request resolves; if none does, the refusal of the one that got
        furthest (a toolkit this kind lacks, then its GPUs, PyTorch's wheel for it, the wheel's GPUs, the rest)."""
        if req.cuda:
            return self._resolve(matrix, req, [])
        failed: list[tuple[int, str, ResolveError]] = []
        for version in defaults.cudas(matrix, req):
            reached: list[str] = ["default"]
            try:
                return self._resolve(matrix, dataclasses.replace(req, cuda=version), reached)
            except ResolveError as e:
                failed.append((len(reached), version, e))
        _, version, error = max(failed, key=lambda f: f[0])   # the first of the furthest: the most preferred of them
        if f"CUDA {version}" in str(error):   # a CUDA the user did not pin: say how it came to be named
            error.args = (f"no CUDA in the matrix fits the rest of the request, the nearest being {version}: {error}",)
        raise error

    def _resolve(self, matrix: Matrix, req: Request, reached: list[str]) -> Spec:
        """Resolve with req.cuda set, appending to `reached` each step passed (empty: the CUDA was the user's)."""
        gpus = req.gpus or ()
        cuda = choose.cuda(matrix, str(req.cuda))
        if not reached:   # a pinned CUDA: a GPU it cannot target is said first
            choose.check_archs(matrix, cuda, gpus)
        os_, base, cudnn = self.toolchain(matrix, req, cuda, gpus)
        reached.append("toolchain")
        choose.check_archs(matrix, cuda, gpus)
        reached.append("archs")
        if choose.no_torch(req.torch):  # the toolkit alone: nvcc, no PyTorch
            return self._without_torch(matrix, req, cuda, gpus, os_, base, cudnn)
        warnings: list[str] = []
        torch, variant = choose.torch_for(matrix, cuda, req.torch, f"CUDA {cuda.version}", warnings, gpus, req.python)
        reached.append("wheel")
        choose.check_torch_archs(torch, variant, gpus)
        reached.append("runs")
        py = choose.python(os_, torch, req.python, choose.pythons(self.oses(matrix, req, cuda, os_)))
        gcc = choose.gcc(os_, cuda, req.gcc)
        llvm = choose.llvm(matrix, os_, cuda, req.llvm, warnings, req.llvm_role)
        if variant != torch.pypi_default:
            where = index_url(matrix.torch_index, torch, variant) or "your pip configuration"
            warnings.append(f"PyTorch {torch.version}'s {variant} wheel is only on PyTorch's own index ({where}), not "
                            f"on PyPI (PyPI's {torch.version} is its {torch.pypi_default} build): the build fetches it "
                            f"from there, or from a mirror of it in your pip configuration")
        return Spec(
            kind=self.name, target=req.target, gpus=tuple(g.key for g in gpus), ccs=choose.ccs(gpus),
            cuda=cuda.version, cuda_full=cuda.full, cudnn=cudnn, min_driver=cuda.min_driver,
            torch=torch.version, torch_variant=variant, python=py, os=os_.key, base=base, gcc=gcc,
            llvm=llvm, triton=torch.triton, pip_toolkit=self.pip_toolkit(cuda), cuda_home=self.cuda_home(cuda, py),
            torch_index=index_url(matrix.torch_index, torch, variant),
            torch_requirement=choose.torch_requirement(torch, variant), warnings=tuple(warnings),
            **req.extras(matrix, torch),
        )

    def _without_torch(self, matrix: Matrix, req: Request, cuda: Cuda, gpus: tuple[Gpu, ...], os_: Os, base: str,
                       cudnn: str | None) -> Spec:
        """`torch = "none"`: the toolkit, the compilers and Python, without PyTorch (nvcc-only work)."""
        warnings: list[str] = []
        return Spec(
            kind=self.name, target=req.target, gpus=tuple(g.key for g in gpus), ccs=choose.ccs(gpus),
            cuda=cuda.version, cuda_full=cuda.full, cudnn=cudnn, min_driver=cuda.min_driver,
            torch=None, torch_variant=choose.NO_TORCH, python=choose.python(os_, None, req.python), os=os_.key,
            base=base, gcc=choose.gcc(os_, cuda, req.gcc), llvm=choose.llvm(matrix, os_, cuda, req.llvm, warnings, req.llvm_role),
            triton=None, pip_toolkit=self.pip_toolkit(cuda), cuda_home=self.cuda_home(cuda, os_.python),
            torch_index=None, torch_requirement="", warnings=tuple(warnings), **req.extras(matrix),
        )

    def tag_parts(self, spec: Spec) -> list[str]:
        cu = "cu" + (spec.cuda or "").replace(".", "") + self.tag_suffix
        torch = f"torch{spec.torch}" if spec.torch else "notorch"
        return [cu, torch, py_part(spec), sm_part(spec)]


class CudaImage(CudaKind):
    name = "cuda-image"
    toolkit = "image"
    toolkit_help = "nvidia/cuda base"

    def nsys(self, matrix: Matrix, cuda: Cuda) -> str | None:
        return cuda.nsys_nvidia  # NVIDIA's apt package nsight-systems-<it>, from the repository the base image carries

    def no_nsys(self, cuda: Cuda) -> str:
        return f"none: docker/matrix.toml pins no Nsight Systems for CUDA {cuda.version} (nsys_nvidia)"

    def oses(self, matrix: Matrix, req: Request, cuda: Cuda, chosen: Os) -> list[Os]:
        return [chosen] if req.os else [matrix.os[k] for k in cuda.images]

    def toolchain(self, matrix: Matrix, req: Request, cuda: Cuda, gpus: tuple[Gpu, ...]) -> tuple[Os, str, str | None]:
        if not cuda.images:
            why = cuda.deleted or "no nvidia/cuda devel image is listed"
            raise UnfitError(f"CUDA {cuda.version} has no base image ({why}); use --base-image with your own image, "
                             f"or other pins.")
        if req.os:
            if req.os not in cuda.images:
                mean = "" if req.os in matrix.os else choose.did_you_mean(req.os, cuda.images)
                raise UnfitError(f"CUDA {cuda.version} has no nvidia/cuda image for {req.os}{mean} "
                                   f"(available: {', '.join(sorted(cuda.images))}); choose one of those.")
            os_ = choose.os_(matrix, req.os)
        else:
            # Newest OS whose default gcc CUDA accepts; else the newest with an older gcc packaged.
            oses = sorted((matrix.os[k] for k in cuda.images), key=lambda o: vkey(re.sub(r"^[a-z]+", "", o.key)),
                          reverse=True)
            fitting = [o for o in oses if o.gcc_default <= cuda.max_gcc] or \
                      [o for o in oses if any(g <= cuda.max_gcc for g in o.gcc)] or oses
            os_ = defaults.os_for(req, fitting)
        return os_, cuda.images[os_.key].tag, cuda.images[os_.key].cudnn or None


KIND = CudaImage()
