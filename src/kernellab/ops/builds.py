"""Building the C++/CUDA ops ahead of time: one op's library (with the arch-specific variants its op.toml
`requires`), every selected op, the table of compile times and registers, the record of what each library
holds, and `python -m kernellab.ops build` (what `invoke build-kernels` runs).

Loading a built op (and importing Triton ones) is kernellab.ops.library's; the compiling itself is
kernellab.ops.extensions'.
"""
from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import ConfigError, ExtensionError
from ..image.targets import vkey
from . import compilerlog, extensions
from .spec import KERNELS, OpSpec, discover

COMMON = KERNELS / "_common"  # headers shared by all ops; on every op's include path


def common_dir(op: OpSpec) -> Path:
    """The shared headers on the op's include path: `_common/` beside the op's folder (an op copied into
    another kernels folder with its `_common/` builds against that copy), else kernels/_common."""
    beside = op.path.parent / "_common"
    return beside if beside.is_dir() else COMMON


def kernel_sources(op: OpSpec) -> dict[str, Any]:
    """What the op compiles, by content (extensions.content_digest): `sha256` over `files`, each file (its sources and
    the headers they include, from its folder and the shared ones) by the folder it lies in, e.g.
    `softmax/softmax.cu` and `_common/rowwise.cuh`, wherever those folders are. A bench run records it per op, so
    that a result names the kernel code it timed even where the checkout's commit does not (uncommitted edits, a
    copied tree)."""
    common = common_dir(op)
    digest, files = extensions.content_digest([op.path / s for s in op.sources], [common],
                                              {op.path: op.name, common: "_common"})
    return {"sha256": digest, "files": files}


def unbuildable(op: OpSpec) -> str | None:
    """Why `op` has nothing to build ahead of time here, or None when it can be built."""
    import torch

    if op.kind == "triton":
        return "Triton compiles at the first call"
    if op.kind == "cuda" and torch.version.cuda is None:
        return f"needs a CUDA build of torch (this is {torch.__version__})"
    if op.kind == "cuda" and op.min_cuda and vkey(torch.version.cuda or "0") < vkey(op.min_cuda[0]):
        return f"{op.name} needs CUDA {op.min_cuda[0]} or newer ({op.min_cuda[1]}); this is CUDA {torch.version.cuda}"
    return None


def build(op: OpSpec, *, verbose: bool = False, kernel_library: bool = False) -> extensions.Build:
    """Compile what changed in a C++/CUDA op and load its library (its ops appear under torch.ops).
    kernel_library: its .cu files in a library of their own (extensions.build), for a fresh process."""
    if op.kind == "triton":
        raise ExtensionError(f"{op.name} is a Triton op: there is nothing to compile ahead of time.")
    variants, _ = arch_requirements(op, gpu=False)
    return extensions.build(
        f"kernellab_{op.name}", [op.path / s for s in op.sources],
        cuda=op.kind == "cuda", include_dirs=[common_dir(op)], verbose=verbose, arch_specific=variants,
        kernel_library=kernel_library,
    )


def arch_requirements(op: OpSpec, *, gpu: bool = True) -> tuple[list[str], dict[str, str]]:
    """The arch-specific variants this toolkit builds for the op (op.toml's `requires`, for the archs of
    this build), and why each candidate that requires one cannot run here: the toolkit is too old, the
    build's arch list lacks that arch, or (with `gpu`) this GPU is another one."""
    if not op.requires:
        return [], {}
    import torch

    from ..image.targets import load

    known = load().arch_specific
    cuda = torch.version.cuda or "0"
    try:
        archs = {a.strip().removesuffix("+PTX") for a in extensions.plain_arch_list().replace(" ", ";").split(";")}
    except ExtensionError:
        archs = set()  # no arch list and no GPU: unavailable() says so first
    capability = None
    if gpu and torch.cuda.is_available():
        capability = "{}.{}".format(*torch.cuda.get_device_capability())
    variants, reasons = [], {}
    for label, variant in op.requires.items():
        sm, base = "sm_" + variant.replace(".", ""), variant[:-1]
        if vkey(cuda) < vkey(known[variant]):
            reasons[label] = f"{label} needs {sm} code, which CUDA {known[variant]} or newer builds; this is CUDA {cuda}"
        elif base not in archs:
            reasons[label] = (f"{label} needs {sm} code, but this build's arch list ({';'.join(sorted(archs)) or 'none'}) "
                              f"has no {base}: use a target for GPUs of compute capability {base}")
        else:
            if variant not in variants:
                variants.append(variant)
            same = capability == base if variant.endswith("a") else (capability or "").split(".")[0] == base.split(".")[0]
            if capability is not None and not same:
                reasons[label] = f"{label} needs a GPU of compute capability {base} for its {sm} code; this GPU is {capability}"
    return variants, reasons


@dataclass(frozen=True)
class BuildOutcome:
    """One op's ahead-of-time build: the build, or why there is none (`failed` tells the two apart)."""

    op: OpSpec
    build: extensions.Build | None = None
    note: str = ""
    failed: bool = False


def build_all(select: str | None = None, *, verbose: bool = False, root: Path | None = None) -> list[BuildOutcome]:
    """Build every selected op that has something to build; one op's failure does not stop the others."""
    specs = discover(root, select=select)
    if not specs:
        raise ConfigError(f"no op matches -k {select!r}; the ops are the folders under kernels/ with an op.toml.")
    outcomes = []
    for op in specs:
        reason = unbuildable(op)
        if reason:
            outcomes.append(BuildOutcome(op, note=reason))
            continue
        try:
            outcomes.append(BuildOutcome(op, build(op, verbose=verbose)))
        except ExtensionError as e:
            outcomes.append(BuildOutcome(op, note=str(e), failed=True))
    return outcomes


def build_table(outcomes: list[BuildOutcome]) -> str:
    """A table of compile time and, per kernel, registers, spills, stack and shared memory (ptxas -v)."""
    kernels = [r for o in outcomes if o.build for r in o.build.resources]
    names = dict(zip([r.function for r in kernels], compilerlog.demangle([r.function for r in kernels])))
    header = ("op", "status", "seconds", "kernel", "arch", "regs", "spill st/ld", "stack", "smem")
    rows: list[tuple[str, ...]] = []
    for o in outcomes:
        if o.build is None:
            note = "" if o.failed else o.note
            rows.append((o.op.name, "FAILED" if o.failed else "skipped", "", note, "", "", "", "", ""))
            continue
        status = "compiled" if o.build.compiled else "cached"
        first = (o.op.name, status, f"{o.build.seconds:.1f}")
        if not o.build.resources:
            rows.append((*first, "(no GPU kernels)", "", "", "", "", ""))
        for i, r in enumerate(o.build.resources):
            kernel = compilerlog.short_name(names[r.function])
            rows.append((*(first if i == 0 else ("", "", "")), kernel, r.arch, str(r.registers),
                         f"{r.spill_stores}/{r.spill_loads}", str(r.stack_bytes), str(r.shared_bytes)))
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in [header, *rows]]
    errors = [f"\n{o.op.name}: {o.note}" for o in outcomes if o.failed]
    return "\n".join(lines) + "".join(errors) + _code_lines(outcomes)


def _code_lines(outcomes: list[BuildOutcome]) -> str:
    """Which GPU code each built library holds (cuobjdump --list-elf / --list-ptx), when cuobjdump is here."""
    from . import binaries

    lines = []
    for o in outcomes:
        if o.build is None or o.op.kind != "cuda":
            continue
        f = binaries.fingerprint(o.build.device_code)
        if f.cubins or f.ptx:
            ptx = f"; PTX {' '.join(f.ptx)}" if f.ptx else ""
            lines.append(f"  {o.op.name}: SASS {' '.join(f.cubins) or 'none'}{ptx}")
    return "\n\ncode in each library (cuobjdump):\n" + "\n".join(lines) if lines else ""


def main(argv: list[str] | None = None) -> int:
    """`python -m kernellab.ops build [-k EXPR] [-v]`: what `invoke build-kernels` runs."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m kernellab.ops", description="Build kernel ops ahead of time.")
    parser.add_argument("command", choices=["build"])
    parser.add_argument("-k", dest="select", metavar="EXPR", help="only ops whose name matches EXPR (like pytest -k)")
    parser.add_argument("-v", "--verbose", action="store_true", help="show the compiler output")
    parser.add_argument("--record", metavar="FILE", type=Path,
                        help="also write each op's library hash, SASS hash and archs (kernellab.ops.binaries) as JSON")
    parser.add_argument("--kernels", type=Path, metavar="DIR", help="the kernels folder (default: kernels/)")
    args = parser.parse_args(argv)
    try:
        outcomes = build_all(args.select, verbose=args.verbose, root=args.kernels)
    except (ConfigError, ExtensionError) as e:
        print(f"kernellab: {e}", file=sys.stderr)
        return e.exit_code
    print(build_table(outcomes))
    if args.record:
        args.record.write_text(json.dumps(record(outcomes), indent=1, sort_keys=True) + "\n")
    return 1 if any(o.failed for o in outcomes) else 0


def record(outcomes: list[BuildOutcome]) -> dict[str, Any]:
    """Per op: its library's fingerprint (kernellab.ops.binaries), or why there is none."""
    from . import binaries

    found: dict[str, Any] = {}
    for o in outcomes:
        if o.build is None:
            found[o.op.name] = {"skipped" if not o.failed else "failed": o.note}
        else:
            found[o.op.name] = {"library": o.build.library.name, **binaries.fingerprint(o.build.device_code).to_dict()}
    return found
