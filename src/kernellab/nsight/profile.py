"""`invoke profile`: Nsight Compute on exactly the launches the benchmark times, candidates and baselines
side by side; with `--trace`, a torch.profiler trace instead (no counters needed).

    python -m kernellab.nsight.profile -k OP [--shape N|k=v,...|RxC] [--dtype D] [--impl NAME ...] [--set basic|full]
                                [--kernel REGEX] [--clocks] [--trace] [--pass forward|backward|full] [--out DIR]
                                [--kernels DIR]

What the task runs, in the target's container or natively. For each implementation (a candidate or a
baseline) it starts `ncu` on a child of itself (`--launch`), which loads the op, makes the bench inputs,
calls the implementation WARMUP times (JIT, torch.compile, caches: not profiled) and then once inside the
NVTX range `kernellab`; ncu profiles only the kernels launched in that range (`--nvtx-include`), with its
clocks locked to base (`--clock-control base`) and caches flushed before each kernel (`--cache-control
all`), both recorded. `--kernel` narrows it to kernels whose function name (demangled, no parameters:
works for C++ templates and Triton kernels alike) matches a regular expression. `--clocks` runs each
implementation a second time at the GPU's own clocks (`--clock-control none`, only the time and the SM clock) and
gives each kernel the share of the SM clock's change its time followed (kernellab.nsight.ncu.clock_share): about 1
for a kernel the SM's issue and latencies hold, about 0 for one that waits on DRAM.

Each report is read back with ncu's own CSV export and summarized per kernel (kernellab.nsight.ncu, which also
owns ncu's command lines). Output (kernellab.nsight.report): `<out>/profile/<op>-<shape>-<dtype>-<impl>.ncu-rep`
(and `.csv`, every metric), `profile.json` and `summary.md`; written to `<out>/profile.partial/` and renamed at
the end, so a failed run leaves no report that looks complete. This module owns the task itself: the profiled
child (`--launch`), running ncu (twice with `--clocks`) or the trace per implementation, and the command line; the
shape, dtype and implementations are chosen by kernellab.nsight.calls.
"""
from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any, Iterator, Sequence

from .. import ROOT, proc, pythonpath, shown
from ..errors import ConfigError, KernellabError, ProfileError
from ..ops.backward import PASSES as PASS_CHOICES
from ..ops.spec import KERNELS, OpSpec, find_op, parse_spec
from . import report, tools
from .calls import WARMUP, check_pass, choose_case, choose_impls, file_stem, on_this_thread, warmed_calls
from .ncu import (
    CLOCKS_NEED_COUNTERS,
    RANGE,
    SETS,
    check_regex,
    explain_failure,
    import_argv,
    ncu_argv,
    ncu_version,
    parse_raw_csv,
    summarize,
    with_boost,
)

# --------------------------------------------------------------------------- the profiled child (--launch)


def launch(root: Path, name: str, impl: str, shape: dict[str, int], dtype: str, trace: Path | None = None,
           system: str | None = None, which: str = "forward") -> int:
    """Load the op, warm the implementation up, call it once inside the NVTX range (or a torch.profiler
    trace written to `trace`). `which` (--pass): forward, or for an op with a [backward] the backward (its
    forward runs before the range, untimed as in the bench) or the full pass, through autograd as the bench times it."""
    import torch

    call, setup = warmed_calls(_find(root, name), [impl], shape, dtype, system, which)[impl]
    if setup is not None:
        setup()  # the profiled backward's forward: before the range, so only the backward's launches are in it
    torch.cuda.synchronize()
    if trace is not None:
        from torch.profiler import ProfilerActivity, profile

        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            call()
            torch.cuda.synchronize()
        prof.export_chrome_trace(str(trace))
        return 0
    with on_this_thread(which):
        torch.cuda.nvtx.range_push(RANGE)
        call()
        torch.cuda.synchronize()
        torch.cuda.nvtx.range_pop()
    return 0


# --------------------------------------------------------------------------- the driver


def _find(root: Path, name: str) -> OpSpec:
    return parse_spec(find_op(root, name) / "op.toml")


def run(root: Path, name: str, *, shape: str | None = None, dtype: str | None = None,
        impls: Sequence[str] | None = None, set_name: str = "basic", kernel: str | None = None,
        trace: bool = False, out: Path | None = None, system: str | None = None, which: str = "forward",
        clocks: bool = False) -> Path:
    """Profile (or trace) every chosen implementation in pass `which`; returns the finished `<out>/profile` folder.
    clocks: each implementation profiled again at the GPU's own clocks (the module's docstring)."""
    import torch

    if clocks and trace:
        raise ConfigError(CLOCKS_NEED_COUNTERS)
    spec = _find(root, name)
    if spec.kind == "cpu":
        raise ProfileError(f"{spec.name} is a CPU op: Nsight Compute profiles GPU kernels only.")
    check_pass(spec, which)
    chosen_shape, chosen_dtype = choose_case(spec, shape, dtype, torch)
    chosen = choose_impls(spec, impls, system, which)
    from ..ops.library import arch_requirements

    _, unavailable = arch_requirements(spec) if spec.kind == "cuda" else ([], {})
    for impl, _role in chosen:
        if impl in unavailable:
            raise ProfileError(f"cannot profile {unavailable[impl]}.")
    if set_name not in SETS:
        raise ConfigError(f"unknown --set {set_name!r}; use one of {', '.join(SETS)}.")
    if kernel:
        check_regex(kernel)
    ncu = None
    if not trace:
        ncu = tools.find("ncu")
        if ncu is None:
            raise ProfileError("Nsight Compute (ncu) is not installed here: install it (or a CUDA toolkit that "
                               "ships it), set KERNELLAB_NCU to its path, or use --trace.")
    gpu = torch.cuda.get_device_name(0)
    with staged(run_folder(out, gpu) / "profile") as partial:
        doc: dict[str, Any] = {
            "op": spec.name, "shape": chosen_shape, "dtype": chosen_dtype, "pass": which, "gpu": gpu, "torch": torch.__version__,
            "mode": "trace" if trace else "ncu", "set": None if trace else set_name, "kernel_filter": kernel,
            "warmup_calls": WARMUP, "started": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
            "ncu": None if ncu is None else {"path": str(ncu), "version": ncu_version(ncu),
                                             "clock_control": "base", "cache_control": "all",
                                             "nvtx_range": RANGE, "boost_run": clocks},
            "impls": {},
        }
        with gpu_lock(torch):  # a benchmark or sanitizer beside ncu would change what it measures
            _profile_each(spec, root, chosen, chosen_shape, chosen_dtype, doc, partial, ncu, set_name, kernel, trace,
                          system, which, clocks)
        report.write(partial, doc)
    return partial.with_name("profile")


def run_folder(out: Path | None, gpu: str) -> Path:
    """The run's folder: --out, else results/<date>-<time>-<gpu> (the bench's name for a run)."""
    from ..bench.runner import run_name

    return out or ROOT / "results" / run_name(dt.datetime.now(dt.timezone.utc), gpu)


@contextlib.contextmanager
def staged(final: Path) -> Iterator[Path]:
    """A folder whose files are made in `<final>.partial` and renamed to final only when the block ends without an
    error: a failed or interrupted run leaves nothing that looks complete beside finished runs."""
    partial = final.with_name(final.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    try:
        yield partial
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise
    if final.exists():
        shutil.rmtree(final)
    partial.rename(final)


def _profile_each(spec: OpSpec, root: Path, chosen: list[tuple[str, str]], chosen_shape: dict[str, int],
                  chosen_dtype: str, doc: dict[str, Any], partial: Path, ncu: Path | None, set_name: str,
                  kernel: str | None, trace: bool, system: str | None, which: str = "forward",
                  clocks: bool = False) -> None:
    t_all = time.perf_counter()
    for impl, role in chosen:
        stem = file_stem(spec, chosen_shape, chosen_dtype, impl, which)
        program = [sys.executable, "-m", "kernellab.nsight.profile", "--launch", "-k", spec.name, "--impl", impl,
                   "--shape", json.dumps(chosen_shape), "--dtype", chosen_dtype, "--kernels", str(root),
                   "--pass", which, *(["--system", system] if system else [])]
        print(f"profile: {spec.name} {impl} ({role}) ...", flush=True)
        t0 = time.perf_counter()
        if trace:
            path = partial / f"{stem}.trace.json"
            _run_child([*program, "--trace-to", str(path)], what=f"tracing {impl}")
            doc["impls"][impl] = {"role": role, "trace": path.name, "seconds": round(time.perf_counter() - t0, 2)}
            continue
        assert ncu is not None
        ncu_rep = partial / f"{stem}.ncu-rep"
        kernels = _ncu_kernels(ncu, ncu_rep, ncu_argv(ncu, ncu_rep, program, set_name=set_name, kernel=kernel), impl,
                               kernel)
        if clocks:
            print(f"profile: {spec.name} {impl} ({role}) at the GPU's own clocks ...", flush=True)
            boost_rep = partial / f"{stem}-boost.ncu-rep"
            with_boost(kernels, _ncu_kernels(ncu, boost_rep, ncu_argv(ncu, boost_rep, program, set_name=set_name,
                                                                       kernel=kernel, boost=True), impl, kernel))
        seconds = time.perf_counter() - t0
        doc["impls"][impl] = {"role": role, "report": ncu_rep.name, "seconds": round(seconds, 2),
                              "seconds_per_kernel": round(seconds / len(kernels), 2), "kernels": kernels}
    doc["seconds"] = round(time.perf_counter() - t_all, 2)


def _ncu_kernels(ncu: Path, rep: Path, argv: list[str], impl: str, kernel: str | None) -> list[dict[str, Any]]:
    """Run ncu (`argv`, writing `rep`), export the report as CSV beside it (every metric, for a spreadsheet or a
    later comparison) and summarize each kernel; ProfileError when ncu fails or profiles nothing."""
    result = proc.run(argv, check=False, env=child_env())
    if result.returncode != 0 or not rep.exists():
        output = result.stdout + result.stderr
        if result.returncode == 0 and "No kernels were profiled" in output:
            raise ProfileError(_no_kernel(impl, kernel))
        raise ProfileError(f"profiling {impl}: {explain_failure(output, result.returncode, ncu)}")
    csv_text = proc.run(import_argv(ncu, rep), check=False).stdout
    rep.with_suffix(".csv").write_text(csv_text)
    kernels = [summarize(row) for row in parse_raw_csv(csv_text)]
    if not kernels:
        raise ProfileError(_no_kernel(impl, kernel))
    return kernels


def gpu_lock(torch: Any) -> Any:
    """The GPU's mutex (kernellab.bench.gpu_mutex, shared with `invoke bench`), by its UUID."""
    from .. import cache_root
    from ..bench import gpu_mutex

    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    key = str(getattr(props, "uuid", "") or props.name)
    return gpu_mutex.exclusive_gpu(cache_root(), key, label=f"{props.name} {key}")


def _no_kernel(impl: str, kernel: str | None) -> str:
    if kernel:
        return (f"--kernel {kernel!r} matches no kernel that {impl} launches; the filter is a regular expression "
                "on the function name (no namespace or parameters); run without --kernel to see the names.")
    return f"{impl} launched no GPU kernel inside the profiled call (is it a CPU implementation?)."


def child_env() -> dict[str, str]:
    """What a profiled (or sanitized) child of this process gets beside its environment: this kernellab on
    PYTHONPATH, and a TMPDIR (ncu needs one that exists)."""
    return {"PYTHONPATH": pythonpath(), "TMPDIR": os.environ.get("TMPDIR", "/tmp")}


def _run_child(argv: list[str], what: str) -> None:
    result = proc.run(argv, check=False, env=child_env())
    if result.returncode != 0:
        lines = [line for line in (result.stdout + result.stderr).splitlines() if line.strip()]
        raise ProfileError(f"{what} failed: {lines[-1] if lines else f'exit code {result.returncode}'}")


def op_parser(prog: str, description: str) -> argparse.ArgumentParser:
    """The flags every profiler of an op's calls takes (Nsight Compute's, Nsight Systems' timeline): which op, call,
    pass and implementations, a recipe's published system, where the run goes; --launch marks the profiled child."""
    parser = argparse.ArgumentParser(prog=prog, description=description)
    parser.add_argument("-k", dest="op", required=True, metavar="OP")
    parser.add_argument("--shape", help="an index into the op's bench shapes, k=v,k=v, or 4096x1024 (default: the first)")
    parser.add_argument("--dtype", help="default: the op's first bench dtype")
    parser.add_argument("--impl", action="append", help="only this candidate or baseline (repeatable)")
    parser.add_argument("--system", help="a recipe's offer of baselines (JSON; `invoke profile --against` writes it)")
    parser.add_argument("--out", type=Path, help="the run's folder (default results/<date>-<time>-<gpu>)")
    parser.add_argument("--kernels", type=Path, help="the kernels folder (default: kernels/)")
    parser.add_argument("--pass", dest="which", default="forward", choices=PASS_CHOICES,
                        help="the pass, for an op with a [backward] (default forward)")
    parser.add_argument("--launch", action="store_true", help=argparse.SUPPRESS)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = op_parser("python -m kernellab.nsight.profile", __doc__.splitlines()[0])
    parser.add_argument("--set", dest="set_name", default="basic", choices=SETS)
    parser.add_argument("--kernel", help="only kernels whose function name matches this regular expression")
    parser.add_argument("--clocks", action="store_true",
                        help="each implementation again at the GPU's own clocks: how much of the SM clock's change "
                             "each kernel's time followed")
    parser.add_argument("--trace", action="store_true", help="a torch.profiler trace per implementation instead")
    parser.add_argument("--trace-to", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    root = args.kernels.resolve() if args.kernels else KERNELS
    try:
        if args.launch:
            return launch(root, args.op, args.impl[0], json.loads(args.shape), args.dtype, args.trace_to, args.system,
                          args.which)
        folder = run(root, args.op, shape=args.shape, dtype=args.dtype, impls=args.impl, set_name=args.set_name,
                     kernel=args.kernel, trace=args.trace, out=args.out, system=args.system, which=args.which,
                     clocks=args.clocks)
    except KernellabError as e:
        print(f"kernellab: {e}", file=sys.stderr)
        return e.exit_code
    print((folder / report.SUMMARY).read_text(), end="")
    print(f"profile: {shown(folder)}/ (summary.md, profile.json and the reports)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
