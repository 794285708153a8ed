"""Choices every kind makes the same way: GPUs, CUDA, PyTorch, Python, gcc, LLVM and OS from the matrix.

Each function picks the newest compatible choice or raises ResolveError with one sentence that names
the conflict and the nearest valid choice; an unknown name gets the closest known one ("did you mean").
"""
from __future__ import annotations

from typing import Sequence

from ...errors import ResolveError, UnfitError
from ..compat import covers
from ..targets import Cuda, Gpu, Matrix, Os, Torch, vkey
from .names import did_you_mean, known, span


class Unfit(UnfitError):
    """An UnfitError with a detail (where a fact comes from) that a refusal puts after the pins it names, so that its
    first sentence stays short."""

    def __init__(self, message: str, detail: str = ""):
        super().__init__(message)
        self.detail = detail


# --------------------------------------------------------------------------- GPUs and CUDA

def gpus(matrix: Matrix, names: list[str]) -> tuple[Gpu, ...] | None:
    """The GPUs named (sorted by capability), or None for a CPU-only request (`--gpu cpu`)."""
    if not names:
        raise ResolveError("no GPU given; name the GPU(s) the image must run on, e.g. `--gpu a100` "
                           "(several: `--gpu a100,h100`), or `--gpu cpu` for a CPU-only image.")
    if any(n.lower() == "cpu" for n in names):
        if len(names) > 1:
            raise ResolveError("`--gpu cpu` builds a CPU-only image and cannot be combined with GPUs; drop one.")
        return None
    out: list[Gpu] = []
    for n in names:
        g = matrix.gpu(n)
        if g is None:
            listed = ", ".join(f"{g.key} ({g.cc})" for g in sorted(matrix.gpus.values(), key=lambda g: vkey(g.cc)))
            names_known = [name for g in matrix.gpus.values() for name in (g.key, *g.aliases)]
            raise ResolveError(f"unknown GPU `{n}`{did_you_mean(n, [*names_known, 'cpu'])}; known GPUs: {listed}, "
                               f"or cpu. Add a new one to docker/matrix.toml.")
        if g not in out:
            out.append(g)
    return tuple(sorted(out, key=lambda g: vkey(g.cc)))


def ccs(gpus: Sequence[Gpu]) -> tuple[str, ...]:
    return tuple(sorted({g.cc for g in gpus}, key=vkey))


def cuda(matrix: Matrix, version: str) -> Cuda:
    v = str(version).strip()
    if v in matrix.cuda:
        return matrix.cuda[v]
    for c in matrix.cuda.values():
        if v == c.full:
            return c
    raise ResolveError(f"unknown CUDA version `{v}`{did_you_mean(v, matrix.cuda)}; known: {known(matrix.cuda)}.")


def cuda_for(matrix: Matrix, requested: str | None, gpus: Sequence[Gpu]) -> Cuda:
    """The requested CUDA, else the newest that targets every GPU and has a base image or PyPI toolkit."""
    if requested:
        chosen = cuda(matrix, requested)
    else:
        able = [c for c in matrix.cuda.values() if all(g.cc in c.archs for g in gpus) and (c.images or c.pip)]
        if not able:
            raise ResolveError(f"no CUDA version in the matrix can target all of {', '.join(g.key for g in gpus)}; "
                               f"build separate images.")
        chosen = max(able, key=lambda c: vkey(c.version))
    check_archs(matrix, chosen, gpus)
    return chosen


def check_archs(matrix: Matrix, cuda: Cuda, gpus: Sequence[Gpu]) -> None:
    """Refuse a GPU the toolkit cannot emit code for, saying only what the matrix knows (the nearest pins that
    work are found by kernellab.image.resolve, by resolving them)."""
    for g in gpus:
        if g.cc in cuda.archs:
            continue
        able = sorted((c.version for c in matrix.cuda.values() if g.cc in c.archs), key=vkey)
        if not able:
            raise ResolveError(f"no CUDA version in the matrix can target {g.name} ({g.sm}); add one to docker/matrix.toml.")
        if vkey(cuda.version) > vkey(able[-1]):
            why = f"{g.sm} needs CUDA {able[-1]} or older"
        elif vkey(cuda.version) < vkey(able[0]):
            why = f"{g.sm} needs CUDA {able[0]} or newer"
        else:
            why = f"the CUDA versions in the matrix that can target it are {known(able)}"
        raise UnfitError(f"CUDA {cuda.version} cannot target {g.name} ({g.sm}): {why}.")


def wheel_variant(torch: Torch, cuda: Cuda) -> str | None:
    """The wheel variant of `torch` for this toolkit: its own (cu113 for 11.3), else one of the same CUDA major
    (extensions compile, since torch checks only nvcc's major): the newest older minor (cu111 for 11.3), else a
    newer minor, PyPI's build first (cu117 for 11.2 and torch 1.13.1), else None."""
    if cuda.variant in torch.variants:
        return cuda.variant
    minor = cuda_minor(cuda.variant)
    same = [v for v in torch.variants if v.startswith("cu") and same_major(v, cuda.variant)]
    older = [v for v in same if cuda_minor(v) < minor]
    if older:
        return max(older, key=cuda_minor)
    newer = sorted(same, key=lambda v: (v != torch.pypi_default, cuda_minor(v)))
    return newer[0] if newer else None


def variant_cuda(variant: str) -> str:
    """"cu117" -> "11.7", "cu121" -> "12.1", "cu130" -> "13.0"."""
    digits = variant[2:]
    return f"{digits[:-1]}.{digits[-1]}"


def same_major(a: str, b: str) -> bool:
    return variant_cuda(a).split(".")[0] == variant_cuda(b).split(".")[0]


def cuda_minor(variant: str) -> int:
    return int(variant_cuda(variant).split(".")[1])


# --------------------------------------------------------------------------- PyTorch

#: `torch = "none"` (a target) or `--torch none`: an image with the CUDA toolkit and no PyTorch.
NO_TORCH = "none"


def no_torch(requested: str | None) -> bool:
    return str(requested or "").strip().lower() == NO_TORCH


def pinned_torch(matrix: Matrix, requested: str) -> tuple[Torch, str]:
    """The release a PyTorch pin names (the newest of "2.8" or "2.8.0") and the wheel it names ("cu126" of
    "2.8.0+cu126", else ""); an unknown version is refused, naming the closest."""
    req, _, asked = str(requested).strip().partition("+")  # "2.0.1+cu117": that wheel, as pip names it
    matches = [t for k, t in matrix.torch.items() if k == req or k.startswith(req + ".")]
    if not matches:
        raise ResolveError(f"unknown PyTorch version `{req}`{did_you_mean(req, matrix.torch)}; "
                           f"known: {known(matrix.torch)}.")
    return max(matches, key=lambda t: vkey(t.version)), asked


def torch_for(matrix: Matrix, cuda: Cuda | None, requested: str | None, what: str,
              warnings: list[str] | None = None, gpus: Sequence[Gpu] = (), python: str | None = None
              ) -> tuple[Torch, str]:
    """(PyTorch, its wheel variant) for a toolkit (None: CPU). Without a request, the newest release with a wheel
    for exactly this toolkit that runs on every GPU and has wheels for the Python asked for; a requested release
    may use an older minor's wheel of the same CUDA major (said in `warnings`), as a paper's `torch==1.8.0` on
    CUDA 11.3 uses cu111."""
    variant = cuda.variant if cuda else "cpu"
    having = [t for t in matrix.torch.values() if variant in t.variants]
    if requested:
        chosen, asked = pinned_torch(matrix, requested)
        found = _asked_variant(chosen, asked, variant, what) if asked else \
            wheel_variant(chosen, cuda) if cuda else (variant if variant in chosen.variants else None)
        if found is None:
            alt = f"PyTorch with {variant} wheels: {span([t.version for t in having])}" if having else \
                  f"no PyTorch release has {variant} wheels"
            raise UnfitError(
                f"PyTorch {chosen.version} has no wheel for {what} (published: {', '.join(chosen.variants)}); {alt}.")
        if cuda and found != variant and warnings is not None:
            warnings.append(_variant_note(chosen, found, cuda, asked=bool(asked)))
        return chosen, found
    if not having:
        raise UnfitError(f"no PyTorch release in the matrix publishes {variant} wheels for {what}.")
    runs = [t for t in having if all(covers(t.archs.get(variant, ()), g.cc) for g in gpus)]
    if not runs:
        g = next(g for g in gpus if not any(covers(t.archs.get(variant, ()), g.cc) for t in having))
        raise Unfit(f"PyTorch's {variant} wheels ({span([t.version for t in having])}) carry no kernels for {g.name} "
                    f"({g.sm}), so PyTorch would fail there with \"no kernel image is available\".",
                    f"docker/wheels.toml lists the architectures of each {variant} wheel, with sources")
    fits = [t for t in runs if not python or t.supports_python(str(python))]
    if not fits:
        lo, hi = min((t.python[0] for t in runs), key=vkey), max((t.python[1] for t in runs), key=vkey)
        raise UnfitError(f"no PyTorch release with {variant} wheels that run on {', '.join(g.name for g in gpus) or 'it'} "
                         f"has wheels for Python {python} (they have {lo}–{hi}).")
    return max(fits, key=lambda t: vkey(t.version)), variant


def _variant_note(torch: Torch, found: str, cuda: Cuda, *, asked: bool) -> str:
    """What taking another CUDA minor's wheel means: extensions compile; a newer runtime asks more of the driver."""
    start = f"its {found} wheel" if asked else f"PyTorch {torch.version} has no {cuda.variant} wheel: its {found} wheel"
    runtime = variant_cuda(found)
    if vkey(runtime) < vkey(cuda.version):
        return f"{start} (CUDA {runtime} runtime) with the CUDA {cuda.version} toolkit; extensions compile (same CUDA major)"
    driver = f" (any driver from {cuda.mvc_driver} does, through minor version compatibility)" if cuda.mvc_driver else ""
    return (f"{start} (CUDA {runtime} runtime, newer than the CUDA {cuda.version} toolkit); extensions compile (same "
            f"CUDA major); the driver must run CUDA {runtime}{driver}")


def _asked_variant(torch: Torch, asked: str, variant: str, what: str) -> str:
    """A variant named with the version ("2.0.1+cu117"): published, and of the toolkit's CUDA major."""
    if asked not in torch.variants:
        raise UnfitError(f"PyTorch {torch.version} has no {asked} wheel (published: {', '.join(torch.variants)}).")
    if variant == "cpu" or asked == "cpu":
        if asked != variant:
            raise ResolveError(f"PyTorch {torch.version}+{asked} is not for {what}; use +{variant}.")
        return asked
    if not same_major(asked, variant):
        raise UnfitError(f"PyTorch {torch.version}+{asked} is for CUDA {variant_cuda(asked)}, another major than "
                         f"{what}: extensions would not compile (torch checks nvcc's major).")
    return asked


def check_torch_archs(torch: Torch, variant: str, gpus: Sequence[Gpu]) -> None:
    """Refuse a GPU the PyTorch wheel carries no kernels for (neither its SASS nor PTX the driver can JIT): an
    image would build and then fail there with "no kernel image is available for execution on the device"."""
    archs = torch.archs.get(variant, ())
    for g in gpus:
        if not covers(archs, g.cc):
            raise Unfit(f"PyTorch {torch.version} {variant} wheels carry no kernels for {g.name} ({g.sm}), so PyTorch "
                        f"would fail there with \"no kernel image is available\".",
                        f"PyTorch {torch.version} {variant} wheels are built for {';'.join(archs)}: "
                        f"{torch.arch_sources.get(variant, 'docker/wheels.toml')}")


def torch_requirement(torch: Torch, variant: str) -> str:
    """Exact requirement: a non-default variant by its local version, so no other build can match."""
    if torch.pypi_default and variant == torch.pypi_default:
        return f"torch=={torch.version}"
    return f"torch=={torch.version}+{variant}"


# --------------------------------------------------------------------------- the OS and its toolchain

def os_(matrix: Matrix, key: str) -> Os:
    if key not in matrix.os:
        raise ResolveError(f"unknown OS `{key}`{did_you_mean(key, matrix.os)}; known: {', '.join(sorted(matrix.os))}.")
    return matrix.os[key]


def os_for_base(matrix: Matrix, base: str) -> str:
    for o in matrix.os.values():
        if o.image == base:
            return o.key
    raise ResolveError(f"no OS in docker/matrix.toml uses base `{base}`; add an [os] entry for it.")


def python(os_: Os | None, torch: Torch | None, requested: str | None, offered: Sequence[str] = ()) -> str:
    """The Python asked for, else the OS's own (or the newest it has) that PyTorch has wheels for. `offered`: the
    Pythons of every OS the image could be built on (default: the OS's), of which a refusal names the nearest that
    PyTorch has wheels for."""
    available = os_.pythons if os_ else ()
    if requested:
        py = str(requested).strip()
        if torch and not torch.supports_python(py):
            fits = [p for p in (offered or available) if torch.supports_python(p)]
            near = min(fits, key=lambda p: (abs(vkey(p)[1] - vkey(py)[1]), vkey(p))) if fits else None
            way = f"use --python {near} or another PyTorch version" if near else \
                "and no OS this image can be built on has one of those: use another PyTorch version"
            raise ResolveError(
                f"PyTorch {torch.version} supports Python {torch.python[0]}–{torch.python[1]}, not {py}; {way}.")
        if os_ and py not in available:
            raise ResolveError(f"Python {py} is not available on {os_.key} (available: {known(available)}); "
                               f"choose one of those or another --ubuntu.")
        return py
    assert os_ is not None
    fits = [p for p in available if torch is None or torch.supports_python(p)]
    if os_.python in fits:
        return os_.python
    if not fits:
        raise ResolveError(
            f"no Python on {os_.key} ({known(available)}) fits PyTorch {torch.version if torch else ''} "
            f"({torch.python[0] if torch else ''}–{torch.python[1] if torch else ''}); choose another OS or PyTorch.")
    return max(fits, key=vkey)


def gcc(os_: Os, cuda: Cuda | None, requested: int | None) -> int:
    limit = cuda.max_gcc if cuda else 99
    if requested is not None:
        if cuda and requested > limit:
            raise ResolveError(f"gcc {requested} is newer than CUDA {cuda.version} accepts (max gcc {limit}); "
                               f"use --gcc {limit} or a newer CUDA.")
        if requested not in os_.gcc:
            raise ResolveError(f"gcc {requested} is not packaged for {os_.key} (available: "
                               f"{', '.join(map(str, os_.gcc))}); choose one of those.")
        return requested
    if os_.gcc_default <= limit:
        return os_.gcc_default
    fits = [g for g in os_.gcc if g <= limit]
    if not fits:
        raise ResolveError(f"{os_.key} has no gcc old enough for CUDA {cuda.version if cuda else ''} "
                           f"(max gcc {limit}); use an older --ubuntu.")
    return max(fits)


def llvm(matrix: Matrix, os_: Os, cuda: Cuda | None, requested: str | None, warnings: list[str],
         role: str = "cuda") -> str | None:
    """The LLVM (clang) version; only clang as a CUDA compiler (role "cuda") is held against the CUDA it compiles:
    as a library (role "library": llvm-config, as TVM links it) any version goes with any toolkit."""
    if requested in (None, ""):
        return max(os_.llvm, key=vkey) if os_.llvm else None
    v = str(requested).strip()
    if v.lower() == "none":
        return None
    if v not in matrix.llvm:
        raise ResolveError(f"unknown LLVM version `{v}`{did_you_mean(v, matrix.llvm)}; known: {known(matrix.llvm)}, "
                           f"or none.")
    if v not in os_.llvms:
        raise ResolveError(f"LLVM {v} is not packaged for {os_.key} (available: {known(os_.llvms)}); "
                           f"choose one of those or another --ubuntu.")
    if role == "cuda" and cuda and vkey(matrix.llvm[v]) < vkey(cuda.version):
        warnings.append(f"clang {v} compiles CUDA only up to {matrix.llvm[v]} as a CUDA compiler; "
                        f"nvcc is unaffected")
    return v


# --------------------------------------------------------------------------- optional extras

def extras(matrix: Matrix, names: Sequence[str]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The extras asked for (matrix.toml `[extra.NAME]`), in order and once each, and the pip requirements they add."""
    chosen: list[str] = []
    pip: list[str] = []
    for name in names:
        if name not in matrix.extras:
            listed = ", ".join(sorted(matrix.extras)) or "none"
            raise ResolveError(f"unknown extra `{name}`{did_you_mean(name, matrix.extras)}; known extras: {listed} "
                               f"(add one as [extra.NAME] in docker/matrix.toml).")
        if name not in chosen:
            chosen.append(name)
            pip += [p for p in matrix.extras[name].pip if p not in pip]
    return tuple(chosen), tuple(pip)


def pythons(oses: Sequence[Os]) -> tuple[str, ...]:
    """Every Python the OSes have (their own or from a PPA)."""
    return tuple(sorted({p for o in oses for p in o.pythons}, key=vkey))
