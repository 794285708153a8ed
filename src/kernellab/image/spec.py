"""What an image is made of: the frozen Spec a request resolves to, and the facts of a --base-image.

Records only: kernellab.image.resolve (through kernellab.image.kinds) makes them, render, images, locks, doctor and
recipes read them. Two equal Specs build the same image.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field
from typing import Any

from .nsys import home as _nsys_home

#: Fields added after the first images were locked, and their defaults: a spec that keeps the default keeps its digest.
_NEW_DEFAULTS = {"as_of": None, "llvm_role": "cuda", "nsys": None}


@dataclass(frozen=True)
class Spec:
    """Everything needed to render and build one image; two equal Specs build the same image."""

    kind: str                      # a name in kernellab.image.kinds.REGISTRY
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
    as_of: str | None = None       # "2023-01-31": pip packages not pinned resolve as of that day
    llvm_role: str = "cuda"        # "library": LLVM for llvm-config (dev packages), not clang for CUDA
    nsys: str | None = None        # the image's Nsight Systems (matrix.toml's pin, e.g. "2023.4.4.54~12.4.1-2"); None: none
    nsys_note: str = field(default="", compare=False)  # why there is none (the summary's words); not in the digest
    warnings: tuple[str, ...] = field(default=(), compare=False)
    tag_parts: tuple[str, ...] = field(default=(), compare=False)  # the kind's readable tag; not in the digest

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
        d.pop("tag_parts")
        d.pop("nsys_note")
        for key, default in _NEW_DEFAULTS.items():  # a field added later, at its default, leaves digests as they were
            if d[key] == default:
                d.pop(key)
        d["arch_list"] = self.arch_list
        return d

    @property
    def nsys_home(self) -> str | None:
        """Where the image's Nsight Systems is (`bin/nsys`, `host-linux-x64/QdstrmImporter`), if it has one."""
        return _nsys_home(self.nsys) if self.nsys else None

    @property
    def digest(self) -> str:
        blob = json.dumps(self.to_dict(), sort_keys=True).encode()
        return hashlib.sha256(blob).hexdigest()

    @property
    def tag(self) -> str:
        """Deterministic image tag: readable versions (the kind's tag_parts) plus a short hash of the whole spec."""
        return "kernellab:" + "-".join(p for p in self.tag_parts if p) + "-" + self.digest[:6]

    def summary(self) -> str:
        rows = [
            ("target", self.target or "(flags)"), ("kind", self.kind), ("base", self.base),
            ("gpus", ", ".join(_gpu_shown(g) for g in self.gpus) or "-"), ("arch list", self.arch_list or "-"),
            ("cuda", self.cuda_full or "-"), ("cudnn", self.cudnn or "-"),
            ("min driver", self.min_driver or "-"),
            ("torch", ("none: the CUDA toolkit alone" if self.cuda else "none") if self.torch_variant == "none" else
             f"{self.torch or 'from base image'} ({self.torch_variant})"),
            ("triton", self.triton or "-"), ("python", self.python),
            ("gcc", str(self.gcc) if self.gcc else "from base"), ("llvm", self.llvm or "-"),
            ("extras", ", ".join(self.extras) or "-"),
            ("nsys", f"{self.nsys} in {self.nsys_home}" if self.nsys else self.nsys_note or "-"),
            *((("pip as of", f"{self.as_of} (packages not pinned)"),) if self.as_of else ()),
            ("tag", self.tag),
        ]
        text = "\n".join(f"  {k:<11} {v}" for k, v in rows)
        for w in self.warnings:
            text += f"\n  warning: {w}"
        return text


def _gpu_shown(key: str) -> str:
    """A GPU as the summary shows it: its key and the models it stands for (`a10 (A10 / A40 / RTX 30)`), so that
    `--gpu rtx3090` is recognisable in it."""
    from .targets import load  # the matrix: read once, cached

    gpu = load().gpus.get(key)
    return f"{key} ({gpu.name})" if gpu else key


@dataclass(frozen=True)
class BaseFacts:
    """What a --base-image already has, found by running it (see builder.probe_base)."""

    python: str
    torch: str | None
    torch_cuda: str | None
