"""The base-image kind: an existing image that already has PyTorch (NGC, a site image), verified, never reinstalled.

What the image has (Python, torch, torch's CUDA) is found by running it once (builder.probe_base) and
passed in as BaseFacts; nothing here runs it.
"""
from __future__ import annotations

from ...errors import ResolveError
from ..spec import Spec
from ..targets import Matrix
from . import choose
from .base import Kind, Request, py_part, sm_part
from .debootstrap_cpu import suite


class BaseImage(Kind):
    name = "base-image"

    def probes(self, base: str | None) -> bool:
        return bool(base) and suite(base) is None

    def claims(self, req: Request) -> bool:
        return self.probes(req.base)

    def resolve(self, matrix: Matrix, req: Request) -> Spec:
        base, facts = str(req.base), req.base_facts
        if req.with_extras:
            raise ResolveError(f"a --base-image target cannot take extras ({', '.join(req.with_extras)}): kernellab never "
                               f"installs Python packages into `{base}`; install them in that image, or drop `extras`.")
        if facts is None:
            raise ResolveError(f"cannot inspect base image `{base}`; make sure it exists (`docker image ls` or `podman image ls`).")
        if facts.torch is None:
            raise ResolveError(f"base image `{base}` has no importable torch for its python3; use an image with "
                               f"PyTorch installed, or drop --base-image to have kernellab install it.")
        have = facts.torch.split("+")[0]
        if req.torch and not (have == req.torch or have.startswith(str(req.torch) + ".")):
            raise ResolveError(f"base image `{base}` has PyTorch {facts.torch}, not {req.torch}; drop --torch "
                               f"(kernellab never reinstalls PyTorch on a --base-image) or choose another image.")
        if req.python and not facts.python.startswith(str(req.python)):
            raise ResolveError(f"base image `{base}` has Python {facts.python}, not {req.python}; drop --python.")
        warnings: list[str] = []
        cuda = None
        if req.gpus is None:
            ccs: tuple[str, ...] = ()
            gpu_keys: tuple[str, ...] = ("cpu",)
            cuda_version = None
        else:
            if not facts.torch_cuda:
                raise ResolveError(f"PyTorch {facts.torch} in `{base}` is a CPU build; use `--gpu cpu` with it, "
                                   f"or an image with a CUDA build of PyTorch.")
            torch_cuda = ".".join(facts.torch_cuda.split(".")[:2])
            if req.cuda and str(req.cuda) != torch_cuda:
                raise ResolveError(f"PyTorch in `{base}` is built for CUDA {torch_cuda}, not {req.cuda}; "
                                   f"drop --cuda or choose another image.")
            cuda = matrix.cuda.get(torch_cuda)
            if cuda is None:
                warnings.append(f"CUDA {torch_cuda} is not in docker/matrix.toml; arch checks skipped")
            else:
                choose.check_archs(matrix, cuda, req.gpus)
            ccs = choose.ccs(req.gpus)
            gpu_keys = tuple(g.key for g in req.gpus)
            cuda_version = cuda.version if cuda else torch_cuda
        known = matrix.torch.get(have)
        return Spec(
            kind=self.name, target=req.target, gpus=gpu_keys, ccs=ccs, cuda=cuda_version,
            cuda_full=cuda.full if cuda else facts.torch_cuda, cudnn=None,
            min_driver=cuda.min_driver if cuda else None, torch=have, torch_variant="preinstalled",
            python=".".join(facts.python.split(".")[:2]), os=None, base=base, gcc=None,
            llvm=None, triton=known.triton if known else None, pip_toolkit=None,
            cuda_home="/usr/local/cuda" if req.gpus is not None else None, torch_index=None,
            warnings=tuple(warnings), **req.extras(matrix),
        )

    def tag_parts(self, spec: Spec) -> list[str]:
        return ["site", f"torch{spec.torch or 'pre'}", py_part(spec), sm_part(spec)]


KIND = BaseImage()
