"""`invoke sanitize`: an op's checks under compute-sanitizer, each error with kernel, file:line and test case.

    python -m kernellab.nsight.sanitize -k OP [--tool memcheck|racecheck|initcheck|synccheck|all]
                                        [--pass forward|backward|all] [--kernels DIR]

What the task runs, in the target's container or natively. For each tool it runs a child of itself
(`--run`) under `compute-sanitizer --tool T`: the child builds and loads the op and runs every case that
`invoke test` checks (kernellab.ops.checks: each candidate at each test shape, dtype and seed, and an op's
backward's gradient checks; --pass forward or backward runs one side only), printing a
marker line before each case and synchronizing after it, so that an error the tool reports belongs to the
case before it. The child runs with PyTorch's caching allocator off (PYTORCH_NO_CUDA_MEMORY_CACHING=1):
every tensor is then its own allocation, and a write one element past a tensor's end is out of bounds for
memcheck instead of landing in the allocator's next block. The kernels carry line info (-lineinfo), so
errors name the source line. API errors are not reported (--report-api-errors no): PyTorch's own probing
calls fail on purpose, and a failed launch of an op's kernel is already an error of the checks.

Each tool's full output is kept in $KERNELLAB_CACHE/sanitize/<op>-<tool>.log. Exit code: 0 when every
tool is clean and every check passes, 1 otherwise.
"""
from __future__ import annotations

import argparse
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from .. import cache_root, proc
from ..errors import ConfigError, KernellabError, ProfileError
from ..ops.spec import KERNELS, find_op, parse_spec
from . import tools
from .profile import child_env, gpu_lock

TOOLS = ("memcheck", "racecheck", "initcheck", "synccheck")
#: compute-sanitizer's exit code when it found errors (ours, so it cannot be confused with the child's).
ERROR_EXIT = 86
MARK = "kernellab-case:"
CHECK_FAILED = "kernellab-check-failed:"
#: The child's last line, with the number of cases: it ran them all (absent when it died, e.g. after a memory error).
FINISHED = "kernellab-cases:"
_PREFIX = "========= "
#: Lines of the tool's own that open no error block.
_NOT_ERRORS = re.compile(r"^(COMPUTE-SANITIZER|ERROR SUMMARY|RACECHECK SUMMARY|LEAK SUMMARY|Target application "
                         r"returned|Saved host backtrace|Host Frame|No |Error: process didn't terminate)")
#: The tool's line when the checked process died (after a memory error its CUDA context is lost).
_DIED = "Error: process didn't terminate successfully"
_WHERE = re.compile(r"in (\S+?\.(?:cu|cuh|h|hpp|cc|cpp|py)):(\d+)")
_KERNEL = re.compile(r" at (?:0x[0-9a-f]+ in )?(.+?)\+0x[0-9a-f]+")
_KERNEL_AFTER_LINE = re.compile(r"\.(?:cu|cuh|h|hpp):\d+:(\S.*?)(?:\s+\[|$)")


@dataclass
class SanitizerError:
    """One error block of compute-sanitizer's output."""

    tool: str
    message: str  # the block's first line, e.g. "Invalid __global__ write of size 4 bytes"
    kernel: str | None
    where: str | None  # file:line, or two joined by " and " (a race's two accesses)
    case: str | None  # the check case running when it was reported
    details: list[str] = field(default_factory=list)

    def key(self) -> tuple[str, str, str | None, str | None]:
        return self.tool, re.sub(r"0x[0-9a-f]+|\d+ hazards?", "#", self.message), self.kernel, self.where


def sanitizer_argv(sanitizer: str | Path, tool: str, program: Sequence[str]) -> list[str]:
    if tool not in TOOLS:
        raise ConfigError(f"unknown --tool {tool!r}; use one of {', '.join(TOOLS)} or all.")
    return [str(sanitizer), "--tool", tool, "--error-exitcode", str(ERROR_EXIT), "--report-api-errors", "no",
            "--print-limit", "100", "--show-backtrace", "device", *program]


def parse(tool: str, output: str) -> tuple[list[SanitizerError], list[str]]:
    """The error blocks in `output` (compute-sanitizer's lines interleaved with the child's), each with the
    case that was running; and the child's failed checks."""
    errors: list[SanitizerError] = []
    failed: list[str] = []
    case: str | None = None
    block: SanitizerError | None = None
    for raw in output.splitlines():
        line = raw.rstrip()
        if line.startswith(MARK):
            case, block = line[len(MARK):].strip(), None
            continue
        if line.startswith(CHECK_FAILED):
            failed.append(line[len(CHECK_FAILED):].strip())
            continue
        if not line.startswith(_PREFIX.rstrip()):
            continue
        text = line[len(_PREFIX):] if line.startswith(_PREFIX) else ""
        if not text.strip():
            block = None
            continue
        if not text.startswith(" ") and not _NOT_ERRORS.match(text):
            block = SanitizerError(tool, _KERNEL.split(text.strip())[0].strip(), None, None, case)
            errors.append(block)
            _locate(block, text)
        elif block is not None:
            block.details.append(text.strip())
            _locate(block, text)
    return errors, failed


def _locate(block: SanitizerError, text: str) -> None:
    if m := _WHERE.search(text):
        where = f"{m.group(1)}:{m.group(2)}"
        if block.where is None:
            block.where = where
        elif where not in block.where.split(" and "):
            block.where += f" and {where}"
    if block.kernel is None:
        if (m := _KERNEL_AFTER_LINE.search(text)) or (m := _KERNEL.search(text)):
            block.kernel = m.group(1).strip()


def merged(errors: list[SanitizerError]) -> list[tuple[SanitizerError, list[str]]]:
    """Errors of one kind at one place once, with every case that met them."""
    seen: dict[tuple, tuple[SanitizerError, list[str]]] = {}
    for e in errors:
        first, cases = seen.setdefault(e.key(), (e, []))
        if e.case and e.case not in cases:
            cases.append(e.case)
    return list(seen.values())


def cases_run(output: str) -> list[str]:
    """The cases the child started, from its marker lines: every case when it finished, and up to the one it
    died in when it did not (its closing `kernellab-cases: N` line is then missing)."""
    return [line[len(MARK):].strip() for line in output.splitlines() if line.startswith(MARK)]


def unexplained(errors: list[SanitizerError], code: int, finished: bool) -> bool:
    """No error to show, yet the checks did not finish (or the tool failed): then, and only then, the tail of
    the tool's output is shown above the report (with errors the report says it all, once)."""
    return not errors and (code not in (0, ERROR_EXIT) or not finished)


def report(tool: str, errors: list[SanitizerError], failed: list[str], cases: int, code: int,
           died: bool = False, finished: bool = True) -> list[str]:
    """The summary of one tool's pass: clean, or its errors merged by place with the cases that met them;
    `cases` is how many cases ran (cases_run)."""
    lines = []
    if unexplained(errors, code, finished):
        lines.append(f"{tool}: the checks did not finish under compute-sanitizer (exit code {code}); its output is above.")
    elif not errors:
        lines.append(f"{tool}: clean ({_cases(cases)})")
    else:
        groups = merged(errors)
        lines.append(f"{tool}: {len(errors)} error{'s' * (len(errors) != 1)} at {len(groups)} "
                     f"place{'s' * (len(groups) != 1)} ({_cases(cases)})")
        for e, where_cases in groups:
            shown = ", ".join(where_cases[:3]) + (f" and {len(where_cases) - 3} more" if len(where_cases) > 3 else "")
            lines.append(f"  {e.message}")
            lines.append(f"    kernel {e.kernel or '?'} at {_short(e.where) or '?'}; case {shown or '?'}")
    if errors and died:
        lines.append("  (the checks stopped there: after a memory error the process's CUDA context is lost)")
    for f in failed:
        lines.append(f"  check failed: {f}")
    return lines


def _cases(n: int) -> str:
    return f"{n} case{'s' * (n != 1)}"


def _short(where: str | None) -> str | None:
    if where is None:
        return None
    for root in (str(KERNELS.parent) + "/", "/workspace/"):
        if where.startswith(root):
            return where[len(root):]
    return where


# --------------------------------------------------------------------------- the child (--run)


def run_checks(root: Path, name: str, which: str = "all") -> int:
    """Every check case of the op, a marker line before each; exit 0 (the tool's verdict is its own). `which`
    (--pass): forward (the forward's checks), backward (an op with a [backward]: its gradient checks), or all."""
    import torch

    from ..ops import checks, library
    find_op(root, name)
    spec = parse_spec(root / name / "op.toml")
    module = library.load(spec)
    count = 0
    for label, reason in module.unavailable.items():
        print(f"skipped {label}: {reason}", flush=True)
    if which == "backward" and spec.backward is None:
        raise ConfigError(f"--pass backward: {spec.name}'s op.toml declares no [backward].")
    forward = [(c, checks.match_reference) for c in checks.cases(spec)] if which != "backward" else []
    backward = [(c, checks.match_gradients) for c in checks.gradient_cases(spec)] if which != "forward" else []
    for (label, shape, dtype, seed), check in forward + backward:
        if label in module.unavailable:
            continue
        what = label if check is checks.match_reference else f"{label} backward"
        case = f"{what} {' '.join(f'{k}={v}' for k, v in shape.items())} {dtype} seed={seed}"
        print(f"{MARK} {case}", flush=True)
        failure = check(spec, module, label, shape, dtype, seed)
        torch.cuda.synchronize()
        if failure:
            print(f"{CHECK_FAILED} {case}: {failure}", flush=True)
        count += 1
    print(f"{FINISHED} {count}", flush=True)
    return 0


# --------------------------------------------------------------------------- the driver


def run(root: Path, name: str, checkers: Sequence[str], which: str = "all") -> int:
    import torch

    find_op(root, name)
    spec = parse_spec(root / name / "op.toml")
    if not spec.needs_gpu:
        raise ProfileError(f"{name} is a CPU op: compute-sanitizer checks GPU kernels only.")
    if not torch.cuda.is_available():
        raise ProfileError("no GPU is visible here: sanitize on the GPU machine, natively or in a target whose "
                           "container gets the GPU (`invoke doctor` shows how it is passed).")
    sanitizer = tools.find("compute-sanitizer")
    if sanitizer is None:
        raise ProfileError("compute-sanitizer is not installed here (it ships with the CUDA toolkit, in "
                           "<cuda>/bin or <cuda>/compute-sanitizer): install the toolkit, or set KERNELLAB_SANITIZER.")
    env = {**child_env(), "PYTORCH_NO_CUDA_MEMORY_CACHING": "1"}
    program = [sys.executable, "-m", "kernellab.nsight.sanitize", "--run", "-k", name, "--kernels", str(root),
               "--pass", which]
    with gpu_lock(torch):  # one GPU tool at a time: the checks under a sanitizer are slow, and perturb timings
        return _each_tool(name, checkers, sanitizer, program, env)


def _each_tool(name: str, checkers: Sequence[str], sanitizer: Path, program: list[str], env: dict[str, str]) -> int:
    bad = False
    for tool in checkers:
        print(f"sanitize: {name} under {tool} ...", flush=True)
        result = proc.run(sanitizer_argv(sanitizer, tool, program), check=False, env=env)
        output = result.stdout + result.stderr
        log = cache_root() / "sanitize" / f"{name}-{tool}.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        log.write_text(output)
        errors, failed = parse(tool, output)
        finished = FINISHED in output
        if unexplained(errors, result.returncode, finished):
            sys.stdout.write("\n".join(output.splitlines()[-30:]) + "\n")
        for line in report(tool, errors, failed, len(cases_run(output)), result.returncode, died=_DIED in output,
                           finished=finished):
            print(line, flush=True)
        print(f"  (compute-sanitizer's full output: {log})", flush=True)
        bad = bad or bool(errors) or bool(failed) or result.returncode != 0 or not finished
    return 1 if bad else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kernellab.nsight.sanitize", description=__doc__.splitlines()[0])
    parser.add_argument("-k", dest="op", required=True, metavar="OP")
    parser.add_argument("--tool", default="memcheck", choices=(*TOOLS, "all"))
    parser.add_argument("--kernels", type=Path, help="the kernels folder (default: kernels/)")
    parser.add_argument("--run", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--pass", dest="which", default="all", choices=("forward", "backward", "all"),
                        help="the checks run: the forward's, the backward's gradient checks, or all (default)")
    args = parser.parse_args(argv)
    root = args.kernels.resolve() if args.kernels else KERNELS
    try:
        if args.run:
            return run_checks(root, args.op, args.which)
        return run(root, args.op, TOOLS if args.tool == "all" else (args.tool,), args.which)
    except KernellabError as e:
        print(f"kernellab: {e}", file=sys.stderr)
        return e.exit_code


if __name__ == "__main__":
    sys.exit(main())
