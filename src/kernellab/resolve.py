"""Resolve a request (flags and/or a named target) into a complete, frozen Spec, or refuse.

Each kind of image (kernellab.kinds) makes its own choices; this module turns flags and a named
target into a Request and hands it to the kind that claims it. Refusals raise ResolveError with one
sentence naming the conflict and the nearest valid choice (or the closest known name).
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
from .targets import Matrix, Target


@dataclass(frozen=True)
class Spec:
    """Everything needed to render and build one image; two equal Specs build the same image."""

    kind: str                      # a name in kernellab.kinds.REGISTRY
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
    extras: tuple[str, ...] = ()   # optional parts (matrix.toml [extra.NAME]), e.g. ("jupyter",)
    extras_pip: tuple[str, ...] = ()  # what they install: one pip step after PyTorch's
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
        from . import kinds

        parts = kinds.get(self.kind).tag_parts(self)
        return "kernellab:" + "-".join(p for p in parts if p) + "-" + self.digest[:6]

    def summary(self) -> str:
        rows = [
            ("target", self.target or "(flags)"), ("kind", self.kind), ("base", self.base),
            ("gpus", ", ".join(self.gpus)), ("arch list", self.arch_list or "-"),
            ("cuda", self.cuda_full or "-"), ("cudnn", self.cudnn or "-"),
            ("min driver", self.min_driver or "-"),
            ("torch", "none: the CUDA toolkit alone" if self.torch_variant == "none" else
             f"{self.torch or 'from base image'} ({self.torch_variant})"),
            ("triton", self.triton or "-"), ("python", self.python),
            ("gcc", str(self.gcc) if self.gcc else "from base"), ("llvm", self.llvm or "-"),
            ("extras", ", ".join(self.extras) or "-"),
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

    The kind that claims the request (kernellab.kinds) makes every choice. torch_index overrides
    the matrix's index for non-default torch variants ("" = none: the pip configuration alone must
    provide them, e.g. a mirror or find-links); kinds.torch_index.choose_index says which to pass.
    """
    from . import kinds  # the kinds build Specs: imported here, not at the top, to keep one import order
    from .kinds import choose

    if torch_index is not None:
        matrix = dataclasses.replace(matrix, torch_index=torch_index)
    t = Target(name="")
    if target:
        if target not in matrix.targets:
            raise ResolveError(f"unknown target `{target}`{choose.did_you_mean(target, matrix.targets)}; "
                               f"known targets: {', '.join(sorted(matrix.targets))}.")
        t = matrix.targets[target]
    # Explicit flags override the named target.
    gcc_major = _gcc_major(gcc) if gcc not in (None, "") else t.gcc
    req = kinds.Request(
        target=target, gpus=choose.gpus(matrix, _list_arg(gpu) or _list_arg(t.gpu)),
        cuda=cuda or t.cuda, torch=torch or t.torch, python=python or t.python,
        llvm=str(llvm) if llvm is not None else t.llvm, gcc=gcc_major,
        os=("ubuntu" + ubuntu if ubuntu else os) or t.os, toolkit=toolkit or t.toolkit,
        base=base_image or t.base, base_facts=base_facts, pip=t.pip, apt=t.apt, with_extras=t.extras,
        description=t.description,
    )
    return kinds.for_request(req).resolve(matrix, req)


def _gcc_major(value: int | str) -> int:
    try:
        return int(value)
    except ValueError:
        raise ResolveError(f"--gcc takes a major version such as 12, not `{value}`.") from None


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
