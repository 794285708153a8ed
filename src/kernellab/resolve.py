"""Resolve a request (flags and/or a named target) into a complete, frozen Spec, or refuse.

Refusals raise ResolveError with one sentence naming the conflict and the nearest valid choice.
Nothing here touches Docker or the network: facts about a `--base-image` are passed in.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import re
from dataclasses import asdict, dataclass, field
from typing import Any, Iterable, Sequence

from .errors import ResolveError
from .targets import Cuda, Gpu, Matrix, Os, Torch, vkey

KINDS = ("cuda-image", "cuda-pip", "cpu", "base-image")


@dataclass(frozen=True)
class Spec:
    """Everything needed to render and build one image; two equal Specs build the same image."""

    kind: str                      # one of KINDS
    target: str | None             # the named target it came from, if any
    gpus: tuple[str, ...]          # GPU keys from the matrix; ("cpu",) for CPU images
    ccs: tuple[str, ...]           # compute capabilities, ascending
    cuda: str | None               # "12.1"; None for CPU images
    cuda_full: str | None
    cudnn: str | None
    min_driver: str | None
    torch: str | None              # "2.5.1"; None = whatever --base-image has (checked at build)
    torch_variant: str             # "cu121", "cpu", or "preinstalled"
    python: str
    os: str | None                 # matrix OS key; None for --base-image
    base: str                      # FROM reference (tag, or debootstrap:<suite>)
    gcc: int | None
    llvm: str | None
    triton: str | None
    pip_toolkit: str | None        # the PyPI requirement that provides nvcc (cuda-pip)
    cuda_home: str | None          # CUDA_HOME inside the image
    torch_index: str | None = field(default=None, compare=False)  # where, not what: not in the digest
    torch_requirement: str = ""    # exact pip requirement, e.g. "torch==2.5.1+cu121"
    extra_pip: tuple[str, ...] = ()
    extra_apt: tuple[str, ...] = ()
    image_pip: tuple[str, ...] = ()
    image_apt: tuple[str, ...] = ()
    description: str = ""
    warnings: tuple[str, ...] = field(default=(), compare=False)

    @property
    def arch_list(self) -> str:
        """TORCH_CUDA_ARCH_LIST form: every arch as SASS, the newest also as PTX ("8.0;9.0+PTX")."""
        if not self.ccs:
            return ""
        return ";".join(self.ccs[:-1] + (self.ccs[-1] + "+PTX",))

    @property
    def gencode(self) -> str:
        """nvcc flags for the same archs: SASS for each, plus PTX for the newest."""
        flags = []
        for i, cc in enumerate(self.ccs):
            n = cc.replace(".", "")
            code = f"[sm_{n},compute_{n}]" if i == len(self.ccs) - 1 else f"sm_{n}"
            flags.append(f"-gencode=arch=compute_{n},code={code}")
        return " ".join(flags)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d.pop("warnings")
        d.pop("torch_index")
        d["arch_list"] = self.arch_list
        return d

    @property
    def digest(self) -> str:
        blob = json.dumps(self.to_dict(), sort_keys=True).encode()
        return hashlib.sha256(blob).hexdigest()

    @property
    def tag(self) -> str:
        """Deterministic image tag: readable versions plus a short hash of the whole spec."""
        py = "py" + self.python.replace(".", "")
        sms = "-".join("sm" + cc.replace(".", "") for cc in self.ccs)
        if self.kind == "cpu":
            parts = ["cpu", f"torch{self.torch}", py]
        elif self.kind == "base-image":
            parts = ["site", f"torch{self.torch or 'pre'}", py, sms]
        else:
            cu = "cu" + (self.cuda or "").replace(".", "") + ("pip" if self.kind == "cuda-pip" else "")
            parts = [cu, f"torch{self.torch}", py, sms]
        return "kernellab:" + "-".join(p for p in parts if p) + "-" + self.digest[:6]

    def summary(self) -> str:
        rows = [
            ("target", self.target or "(flags)"), ("kind", self.kind), ("base", self.base),
            ("gpus", ", ".join(self.gpus)), ("arch list", self.arch_list or "-"),
            ("cuda", self.cuda_full or "-"), ("cudnn", self.cudnn or "-"),
            ("min driver", self.min_driver or "-"),
            ("torch", f"{self.torch or 'from base image'} ({self.torch_variant})"),
            ("triton", self.triton or "-"), ("python", self.python),
            ("gcc", str(self.gcc) if self.gcc else "from base"), ("llvm", self.llvm or "-"),
            ("tag", self.tag),
        ]
        text = "\n".join(f"  {k:<11} {v}" for k, v in rows)
        for w in self.warnings:
            text += f"\n  warning: {w}"
        return text


@dataclass(frozen=True)
class BaseFacts:
    """What a --base-image already has, found by running it (see images.probe_base)."""

    python: str
    torch: str | None
    torch_cuda: str | None


def _known(items: Iterable[str]) -> str:
    return ", ".join(sorted(items, key=vkey))


def _span(versions: Sequence[str]) -> str:
    vs = sorted(versions, key=vkey)
    if not vs:
        return "none"
    return vs[0] if len(vs) == 1 else f"{vs[0]}–{vs[-1]}"


def _list_arg(value: str | Sequence[str] | None) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        value = [value]
    return [p.strip() for v in value for p in v.split(",") if p.strip()]


def resolve(
    matrix: Matrix,
    *,
    target: str | None = None,
    cuda: str | None = None,
    gpu: str | Sequence[str] | None = None,
    torch: str | None = None,
    python: str | None = None,
    llvm: str | None = None,
    gcc: int | str | None = None,
    os: str | None = None,
    ubuntu: str | None = None,
    toolkit: str | None = None,
    base_image: str | None = None,
    base_facts: BaseFacts | None = None,
    torch_index: str | None = None,
) -> Spec:
    """Complete a request with the newest compatible choices, or raise ResolveError.

    torch_index overrides the matrix's index for non-default torch variants ("" = none: the pip
    configuration alone must provide them, e.g. a mirror or find-links).
    """
    if torch_index is not None:
        matrix = dataclasses.replace(matrix, torch_index=torch_index)
    t: dict[str, Any] = {}
    if target:
        if target not in matrix.targets:
            raise ResolveError(f"unknown target `{target}`; known targets: {', '.join(sorted(matrix.targets))}.")
        t = dict(matrix.targets[target])
    # Explicit flags override the named target.
    req: dict[str, Any] = {
        "cuda": cuda or t.get("cuda"), "gpu": _list_arg(gpu) or _list_arg(t.get("gpu")),
        "torch": torch or t.get("torch"), "python": python or t.get("python"),
        "llvm": str(llvm) if llvm is not None else t.get("llvm"),
        "gcc": _gcc_major(gcc) if gcc not in (None, "") else t.get("gcc"),
        "os": ("ubuntu" + ubuntu if ubuntu else os) or t.get("os"),
        "toolkit": toolkit or t.get("toolkit"), "base": base_image or t.get("base"),
    }
    gpus = _gpus(matrix, req["gpu"])
    extra = dict(extra_pip=tuple(t.get("pip", ())), extra_apt=tuple(t.get("apt", ())),
                 image_pip=matrix.image_pip, image_apt=matrix.image_apt,
                 description=t.get("description", ""))
    if req["base"] and not str(req["base"]).startswith("debootstrap:"):
        return _resolve_base_image(matrix, target, req, gpus, base_facts, extra)
    if gpus == ["cpu"]:
        return _resolve_cpu(matrix, target, req, extra)
    return _resolve_cuda(matrix, target, req, gpus, extra)


def _gcc_major(value: int | str) -> int:
    try:
        return int(value)
    except ValueError:
        raise ResolveError(f"--gcc takes a major version such as 12, not `{value}`.") from None


def _gpus(matrix: Matrix, names: list[str]) -> list[Any]:
    if not names:
        raise ResolveError("no GPU given; name the GPU(s) the image must run on, e.g. `--gpu a100` "
                           "(several: `--gpu a100,h100`), or `--gpu cpu` for a CPU-only image.")
    if any(n.lower() == "cpu" for n in names):
        if len(names) > 1:
            raise ResolveError("`--gpu cpu` builds a CPU-only image and cannot be combined with GPUs; drop one.")
        return ["cpu"]
    out: list[Gpu] = []
    for n in names:
        g = matrix.gpu(n)
        if g is None:
            known = ", ".join(f"{g.key} ({g.cc})" for g in sorted(matrix.gpus.values(), key=lambda g: vkey(g.cc)))
            raise ResolveError(f"unknown GPU `{n}`; known GPUs: {known}, or cpu. Add a new one to docker/matrix.toml.")
        if g not in out:
            out.append(g)
    return sorted(out, key=lambda g: vkey(g.cc))


def _cuda(matrix: Matrix, version: str) -> Cuda:
    v = str(version).strip()
    if v in matrix.cuda:
        return matrix.cuda[v]
    for c in matrix.cuda.values():
        if v == c.full:
            return c
    raise ResolveError(f"unknown CUDA version `{v}`; known: {_known(matrix.cuda)}.")


def _check_archs(matrix: Matrix, cuda: Cuda, gpus: list[Gpu]) -> None:
    for g in gpus:
        if g.cc in cuda.archs:
            continue
        able = [c.version for c in matrix.cuda.values() if g.cc in c.archs]
        if not able:
            raise ResolveError(f"no CUDA version in the matrix can target {g.name} ({g.sm}); add one to docker/matrix.toml.")
        if vkey(cuda.version) > max(vkey(a) for a in able):
            hint = f"support for {g.sm} ends with CUDA {max(able, key=vkey)}; use --cuda {max(able, key=vkey)}"
        else:
            hint = f"support for {g.sm} starts with CUDA {min(able, key=vkey)}; use --cuda {min(able, key=vkey)} or newer"
        raise ResolveError(f"CUDA {cuda.version} cannot target {g.name} ({g.sm}): {hint}, or drop that GPU.")


def _torch_for(matrix: Matrix, variant: str, requested: str | None, what: str) -> Torch:
    having = [t for t in matrix.torch.values() if variant in t.variants]
    if requested:
        req = str(requested).strip()
        matches = [t for k, t in matrix.torch.items() if k == req or k.startswith(req + ".")]
        if not matches:
            raise ResolveError(f"unknown PyTorch version `{req}`; known: {_known(matrix.torch)}.")
        chosen = max(matches, key=lambda t: vkey(t.version))
        if variant not in chosen.variants:
            alt = f"PyTorch with {variant} wheels: {_span([t.version for t in having])}" if having else \
                  f"no PyTorch release has {variant} wheels"
            raise ResolveError(
                f"PyTorch {chosen.version} has no wheel for {what} (published: {', '.join(chosen.variants)}); {alt}.")
        return chosen
    if not having:
        raise ResolveError(f"no PyTorch release in the matrix publishes {variant} wheels for {what}; "
                           f"choose another CUDA version.")
    return max(having, key=lambda t: vkey(t.version))


def _check_torch_archs(torch: Torch, variant: str, gpus: list[Gpu]) -> None:
    archs = torch.archs.get(variant)
    if not archs:
        return
    for g in gpus:
        if not covers(archs, g.cc):
            raise ResolveError(
                f"PyTorch {torch.version} {variant} wheels are not built for {g.name} ({g.sm}; built for "
                f"{', '.join(archs)}); choose another PyTorch version or CUDA variant.")


_ARCH = re.compile(r"(?:sm_|compute_)?(\d+)\.?(\d)([af]?)(\+PTX)?", re.IGNORECASE)


def covers(archs: Iterable[str], cc: str) -> bool:
    """Whether code built for archs (TORCH_CUDA_ARCH_LIST entries: "8.6", "9.0a", "12.0+PTX", "sm_90")
    runs on a GPU of compute capability cc.

    SASS runs on the same major at an equal or newer minor (arch-specific "a"/"f" builds only on
    their own capability); PTX is JIT-compiled by the driver for any newer GPU.
    """
    have = tuple(int(p) for p in re.findall(r"\d+", str(cc)))[:2]
    if len(have) < 2:
        return False
    for token in archs:
        m = _ARCH.fullmatch(token.strip())
        if not m:
            continue
        built, specific, ptx = (int(m.group(1)), int(m.group(2))), bool(m.group(3)), bool(m.group(4))
        if built == have or (not specific and built[0] == have[0] and built[1] <= have[1]):
            return True
        if ptx and not specific and built <= have:
            return True
    return False


def _python(os_: Os | None, torch: Torch | None, requested: str | None) -> str:
    available = os_.pythons if os_ else ()
    if requested:
        py = str(requested).strip()
        if torch and not torch.supports_python(py):
            raise ResolveError(
                f"PyTorch {torch.version} supports Python {torch.python[0]}–{torch.python[1]}, not {py}; "
                f"use --python {torch.python[1]} or another PyTorch version.")
        if os_ and py not in available:
            raise ResolveError(f"Python {py} is not available on {os_.key} (available: {_known(available)}); "
                               f"choose one of those or another --ubuntu.")
        return py
    assert os_ is not None
    fits = [p for p in available if torch is None or torch.supports_python(p)]
    if os_.python in fits:
        return os_.python
    if not fits:
        raise ResolveError(
            f"no Python on {os_.key} ({_known(available)}) fits PyTorch {torch.version if torch else ''} "
            f"({torch.python[0] if torch else ''}–{torch.python[1] if torch else ''}); choose another OS or PyTorch.")
    return max(fits, key=vkey)


def _gcc(os_: Os, cuda: Cuda | None, requested: int | None) -> int:
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


def _llvm(matrix: Matrix, os_: Os, cuda: Cuda | None, requested: str | None, warnings: list[str]) -> str | None:
    if requested in (None, ""):
        return max(os_.llvm, key=vkey) if os_.llvm else None
    v = str(requested).strip()
    if v.lower() == "none":
        return None
    if v not in matrix.llvm:
        raise ResolveError(f"unknown LLVM version `{v}`; known: {_known(matrix.llvm)}, or none.")
    if v not in os_.llvms:
        raise ResolveError(f"LLVM {v} is not packaged for {os_.key} (available: {_known(os_.llvms)}); "
                           f"choose one of those or another --ubuntu.")
    if cuda and vkey(matrix.llvm[v]) < vkey(cuda.version):
        warnings.append(f"clang {v} compiles CUDA only up to {matrix.llvm[v]} as a CUDA compiler; "
                        f"nvcc is unaffected")
    return v


def _os(matrix: Matrix, key: str) -> Os:
    if key not in matrix.os:
        raise ResolveError(f"unknown OS `{key}`; known: {', '.join(sorted(matrix.os))}.")
    return matrix.os[key]


def _index(matrix: Matrix, torch: Torch, variant: str) -> str | None:
    if variant == torch.pypi_default or not matrix.torch_index:
        return None
    return matrix.torch_index.replace("{variant}", variant)


def _torch_req(torch: Torch, variant: str) -> str:
    """Exact requirement: a non-default variant by its local version, so no other build can match."""
    if variant == torch.pypi_default:
        return f"torch=={torch.version}"
    return f"torch=={torch.version}+{variant}"


def _resolve_cpu(matrix: Matrix, target: str | None, req: dict[str, Any], extra: dict[str, Any]) -> Spec:
    if req["cuda"]:
        raise ResolveError("`--gpu cpu` builds a CPU-only image; drop --cuda, or name a GPU.")
    base = req["base"] or "debootstrap:bookworm"
    os_ = _os(matrix, req["os"] or _os_for_base(matrix, base))
    torch = _torch_for(matrix, "cpu", req["torch"], "CPU")
    py = _python(os_, torch, req["python"])
    warnings: list[str] = []
    return Spec(
        kind="cpu", target=target, gpus=("cpu",), ccs=(), cuda=None, cuda_full=None, cudnn=None,
        min_driver=None, torch=torch.version, torch_variant="cpu", python=py, os=os_.key,
        base=req["base"] or os_.image, gcc=_gcc(os_, None, req["gcc"]),
        llvm=_llvm(matrix, os_, None, req["llvm"], warnings), triton=None, pip_toolkit=None,
        cuda_home=None, torch_index=_index(matrix, torch, "cpu"), torch_requirement=_torch_req(torch, "cpu"),
        warnings=tuple(warnings), **extra,
    )


def _os_for_base(matrix: Matrix, base: str) -> str:
    for o in matrix.os.values():
        if o.image == base:
            return o.key
    raise ResolveError(f"no OS in docker/matrix.toml uses base `{base}`; add an [os] entry for it.")


def _resolve_cuda(matrix: Matrix, target: str | None, req: dict[str, Any], gpus: list[Gpu],
                  extra: dict[str, Any]) -> Spec:
    if req["cuda"]:
        cuda = _cuda(matrix, req["cuda"])
    else:
        able = [c for c in matrix.cuda.values() if all(g.cc in c.archs for g in gpus) and (c.images or c.pip)]
        if not able:
            raise ResolveError(f"no CUDA version in the matrix can target all of {', '.join(g.key for g in gpus)}; "
                               f"build separate images.")
        cuda = max(able, key=lambda c: vkey(c.version))
    _check_archs(matrix, cuda, gpus)
    toolkit = req["toolkit"] or "image"
    if toolkit not in ("image", "pip"):
        raise ResolveError(f"unknown toolkit `{toolkit}`; use image (nvidia/cuda base) or pip (CUDA from PyPI).")
    warnings: list[str] = []
    if toolkit == "pip":
        if not cuda.pip:
            able = [c.version for c in matrix.cuda.values() if c.pip]
            raise ResolveError(f"CUDA {cuda.version} cannot come from PyPI (its nvcc wheels lack the compiler); "
                               f"PyPI toolkits exist for CUDA {_known(able)}, or use the nvidia/cuda base image.")
        os_ = _os(matrix, req["os"] or _os_for_base(matrix, req["base"] or "debootstrap:bookworm"))
        base, cudnn = req["base"] or os_.image, None
    else:
        if not cuda.images:
            why = cuda.deleted or "no nvidia/cuda devel image is listed"
            newer = [c.version for c in matrix.cuda.values() if c.images and all(g.cc in c.archs for g in gpus)]
            raise ResolveError(f"CUDA {cuda.version} has no base image ({why}); use --base-image with your own "
                               f"image, or --cuda {max(newer, key=vkey) if newer else 'newer'}.")
        if req["os"]:
            if req["os"] not in cuda.images:
                raise ResolveError(f"CUDA {cuda.version} has no nvidia/cuda image for {req['os']} "
                                   f"(available: {', '.join(sorted(cuda.images))}); choose one of those.")
            os_ = _os(matrix, req["os"])
        else:
            # Newest OS whose default gcc CUDA accepts; else the newest with an older gcc packaged.
            oses = sorted((matrix.os[k] for k in cuda.images), key=lambda o: vkey(o.key.lstrip("ubuntudebian")),
                          reverse=True)
            fitting = [o for o in oses if o.gcc_default <= cuda.max_gcc] or \
                      [o for o in oses if any(g <= cuda.max_gcc for g in o.gcc)] or oses
            os_ = fitting[0]
        base, cudnn = cuda.images[os_.key].tag, cuda.images[os_.key].cudnn or None
    torch = _torch_for(matrix, cuda.variant, req["torch"], f"CUDA {cuda.version}")
    _check_torch_archs(torch, cuda.variant, gpus)
    py = _python(os_, torch, req["python"])
    gcc = _gcc(os_, cuda, req["gcc"])
    llvm = _llvm(matrix, os_, cuda, req["llvm"], warnings)
    cuda_home = "/usr/local/cuda"
    if toolkit == "pip":
        cuda_home = f"/opt/venv/lib/python{py}/site-packages/{cuda.pip_home}"
    return Spec(
        kind="cuda-pip" if toolkit == "pip" else "cuda-image", target=target,
        gpus=tuple(g.key for g in gpus), ccs=tuple(sorted({g.cc for g in gpus}, key=vkey)),
        cuda=cuda.version, cuda_full=cuda.full, cudnn=cudnn, min_driver=cuda.min_driver,
        torch=torch.version, torch_variant=cuda.variant, python=py, os=os_.key, base=base, gcc=gcc,
        llvm=llvm, triton=torch.triton, pip_toolkit=cuda.pip if toolkit == "pip" else None,
        cuda_home=cuda_home, torch_index=_index(matrix, torch, cuda.variant),
        torch_requirement=_torch_req(torch, cuda.variant), warnings=tuple(warnings), **extra,
    )


def _resolve_base_image(matrix: Matrix, target: str | None, req: dict[str, Any], gpus: list[Any],
                        facts: BaseFacts | None, extra: dict[str, Any]) -> Spec:
    base = req["base"]
    if facts is None:
        raise ResolveError(f"cannot inspect base image `{base}`; make sure it exists (`docker image ls`).")
    if facts.torch is None:
        raise ResolveError(f"base image `{base}` has no importable torch for its python3; use an image with "
                           f"PyTorch installed, or drop --base-image to have kernellab install it.")
    have = facts.torch.split("+")[0]
    if req["torch"] and not (have == req["torch"] or have.startswith(str(req["torch"]) + ".")):
        raise ResolveError(f"base image `{base}` has PyTorch {facts.torch}, not {req['torch']}; drop --torch "
                           f"(kernellab never reinstalls PyTorch on a --base-image) or choose another image.")
    if req["python"] and not facts.python.startswith(str(req["python"])):
        raise ResolveError(f"base image `{base}` has Python {facts.python}, not {req['python']}; drop --python.")
    warnings: list[str] = []
    if gpus == ["cpu"]:
        ccs: tuple[str, ...] = ()
        cuda = None
        gpu_keys: tuple[str, ...] = ("cpu",)
    else:
        if not facts.torch_cuda:
            raise ResolveError(f"PyTorch {facts.torch} in `{base}` is a CPU build; use `--gpu cpu` with it, "
                               f"or an image with a CUDA build of PyTorch.")
        torch_cuda = ".".join(facts.torch_cuda.split(".")[:2])
        if req["cuda"] and str(req["cuda"]) != torch_cuda:
            raise ResolveError(f"PyTorch in `{base}` is built for CUDA {torch_cuda}, not {req['cuda']}; "
                               f"drop --cuda or choose another image.")
        cuda = matrix.cuda.get(torch_cuda)
        if cuda is None:
            warnings.append(f"CUDA {torch_cuda} is not in docker/matrix.toml; arch checks skipped")
        else:
            _check_archs(matrix, cuda, gpus)
        ccs = tuple(sorted({g.cc for g in gpus}, key=vkey))
        gpu_keys = tuple(g.key for g in gpus)
    known = matrix.torch.get(have)
    return Spec(
        kind="base-image", target=target, gpus=gpu_keys, ccs=ccs,
        cuda=cuda.version if cuda else (None if gpus == ["cpu"] else ".".join((facts.torch_cuda or "").split(".")[:2])),
        cuda_full=cuda.full if cuda else facts.torch_cuda, cudnn=None,
        min_driver=cuda.min_driver if cuda else None, torch=have, torch_variant="preinstalled",
        python=".".join(facts.python.split(".")[:2]), os=None, base=base, gcc=None,
        llvm=None, triton=known.triton if known else None, pip_toolkit=None,
        cuda_home="/usr/local/cuda" if gpus != ["cpu"] else None, torch_index=None,
        warnings=tuple(warnings), **extra,
    )
