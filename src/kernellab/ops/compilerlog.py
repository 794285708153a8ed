"""Reading what the compilers print: ptxas resource reports, the compiler's own error lines, C++ names."""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Sequence

from .. import ROOT, proc


@dataclass(frozen=True)
class KernelResources:
    """What ptxas reported for one kernel (per thread, except shared memory)."""

    source: str
    function: str
    arch: str
    registers: int
    spill_stores: int
    spill_loads: int
    stack_bytes: int
    shared_bytes: int


def demangle(symbols: Sequence[str]) -> list[str]:
    """C++ names for mangled symbols (through c++filt; unchanged where it is missing)."""
    if not symbols or proc.which("c++filt") is None:
        return list(symbols)
    lines = proc.run(["c++filt", *symbols]).stdout.splitlines()
    return lines if len(lines) == len(symbols) else list(symbols)


def short_name(demangled: str) -> str:
    """`void k<float, 4>(float const*, int)` -> `k<float, 4>`: the name and template arguments only."""
    demangled = demangled.replace("(anonymous namespace)::", "")
    depth = 0
    for i, ch in enumerate(demangled):
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth -= 1
        elif ch == "(" and depth == 0:
            demangled = demangled[:i]
            break
    return demangled.removeprefix("void ").strip()


def compiler_messages(log: str, limit: int = 40) -> str:
    """The compiler's own lines from a ninja log: commands, progress and ptxas chatter left out."""
    kept = [line for line in log.splitlines() if line.strip() and not _NOISE.match(line)]
    root = f"{ROOT}/"
    return "\n".join(line.replace(root, "") for line in kept[:limit])


def parse_ptxas(log: str) -> dict[str, list[KernelResources]]:
    """ptxas -v reports from a ninja log, by source file (ninja prints each command, then its output)."""
    found: dict[str, list[KernelResources]] = {}
    source = function = arch = ""
    stack = stores = loads = 0
    for line in log.splitlines():
        if m := _STEP.match(line):
            source = m.group(1)
        elif m := _ENTRY.search(line):
            function, arch = m.group(1), m.group(2)
            stack = stores = loads = 0
        elif (m := _FRAME.search(line)) and function:
            stack, stores, loads = (int(g) for g in m.groups())
        elif (m := _USED.search(line)) and function and source:
            smem = _SMEM.search(line)
            found.setdefault(source, []).append(KernelResources(
                source=source, function=function, arch=arch, registers=int(m.group(1)),
                spill_stores=stores, spill_loads=loads, stack_bytes=stack,
                shared_bytes=int(smem.group(1)) if smem else 0,
            ))
            function = ""
    return found


_NOISE = re.compile(
    r"^(\[\d+/\d+\] |FAILED: |ninja: |ptxas info|\s+\d+ bytes stack frame"
    r"|\S*(nvcc|c\+\+|g\+\+|gcc|cc|clang\+\+|clang)\s)"
)
_STEP = re.compile(r"^\[\d+/\d+\] .* -c (\S+)")
_ENTRY = re.compile(r"Compiling entry function '(\S+)' for '(\w+)'")
_FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_USED = re.compile(r"Used (\d+) registers")
_SMEM = re.compile(r"(\d+) bytes smem")
