"""`invoke profile --timeline`: an Nsight Systems timeline of an op's implementations, called as the bench calls them.

    python -m kernellab.nsight.op_timeline -k OP [--shape ..] [--dtype D] [--pass P] [--impl NAME ...] [--calls N]
                                           [--system OFFER] [--seconds S] [--out DIR] [--kernels DIR]

One capture for all implementations (a candidate, the baselines, a recipe's published system with --system): the
child (`--launch`) loads the op and makes the bench inputs, calls every implementation WARMUP times (JIT,
torch.compile, module loads: before the capture), then starts the capture (cudaProfilerStart: nsys records only from
there, `--capture-range cudaProfilerApi`) and calls each implementation CALLS times inside its own NVTX range named
after it, each call inside a range `call` after an L2 flush (as the bench flushes before each sample), the GPU
synchronised after each; with --pass backward or full, the calls the bench times of that pass (through autograd, a
backward's forward run before the flush, outside the range). Read back with nsys's SQLite export (kernellab.nsight.nsys), each implementation's kernels
per call, launch gaps and copies (kernellab.nsight.timeline) go to `<out>/timeline/`: `summary.md`, `timeline.json`,
`timeline.png` (the call of median wall time of each, kernels under their ranges) and the `.nsys-rep` for Nsight
Systems' GUI; written to `timeline.partial/` and renamed at the end, so a failed run leaves nothing that looks
complete.
"""
from __future__ import annotations

import datetime as dt
import json
import sys
from pathlib import Path
from typing import Any, Sequence

from .. import shown
from ..errors import ConfigError, KernellabError, ProfileError
from ..ops.spec import KERNELS
from . import nsys, timeline, tools
from .calls import WARMUP, check_pass, choose_case, choose_impls, file_stem, on_this_thread, warmed_calls
from .profile import _find, child_env, gpu_lock, op_parser, run_folder, staged

#: Calls of each implementation inside the capture (the picture shows the median one).
CALLS = 10
FOLDER = "timeline"


def launch(root: Path, name: str, impls: Sequence[str], shape: dict[str, int], dtype: str, calls: int,
           system: str | None, which: str = "forward") -> int:
    """The captured child: warm-up outside the capture, then each implementation's calls in NVTX ranges. `which`
    (--pass): the forward, or through autograd as the bench times them the backward (its forward run before the
    L2 flush, outside the call's range) or the full pass."""
    import torch

    prepared = warmed_calls(_find(root, name), impls, shape, dtype, system, which)
    l2 = getattr(torch.cuda.get_device_properties(0), "L2_cache_size", 50 << 20)
    cache = torch.empty(2 * l2, dtype=torch.int8, device="cuda")
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStart()
    with on_this_thread(which):
        for impl, (call, setup) in prepared.items():
            torch.cuda.nvtx.range_push(impl)
            for _ in range(calls):
                if setup is not None:
                    setup()                        # the backward's forward: outside the call's range
                cache.zero_()                      # L2 flushed, outside the call's range
                torch.cuda.synchronize()
                torch.cuda.nvtx.range_push("call")
                call()
                torch.cuda.synchronize()
                torch.cuda.nvtx.range_pop()
            torch.cuda.nvtx.range_pop()
    torch.cuda.cudart().cudaProfilerStop()
    return 0


def run(root: Path, name: str, *, shape: str | None = None, dtype: str | None = None,
        impls: Sequence[str] | None = None, calls: int = CALLS, system: str | None = None,
        seconds: float | None = None, out: Path | None = None, which: str = "forward") -> Path:
    """Capture and summarise every chosen implementation; returns the finished `<out>/timeline` folder."""
    import torch

    spec = _find(root, name)
    if spec.kind == "cpu":
        raise ProfileError(f"{spec.name} is a CPU op: a GPU timeline shows GPU kernels only.")
    if calls < 1:
        raise ConfigError(f"--calls {calls}: give at least 1.")
    check_pass(spec, which)
    chosen = choose_impls(spec, impls, system, which)
    exe = tools.find("nsys")
    if exe is None:
        raise ProfileError("Nsight Systems (nsys) is not installed here and the image has none: install it, set "
                           "KERNELLAB_NSYS to its path, or build a target that carries it (docs/profile.md).")
    problem = nsys.importer_works(exe)
    if problem:
        raise ProfileError(problem)
    version = nsys.version(exe) or "?"
    too_old = nsys.too_old(version, torch.version.cuda)
    if too_old:
        raise ProfileError(too_old)
    chosen_shape, chosen_dtype = choose_case(spec, shape, dtype, torch)
    gpu = torch.cuda.get_device_name(0)
    stem = file_stem(spec, chosen_shape, chosen_dtype, "timeline", which)
    program = [sys.executable, "-m", "kernellab.nsight.op_timeline", "--launch", "-k", spec.name,
               "--shape", json.dumps(chosen_shape), "--dtype", chosen_dtype, "--calls", str(calls), "--pass", which,
               "--kernels", str(root), *[a for impl, _ in chosen for a in ("--impl", impl)],
               *(["--system", system] if system else [])]
    with staged(run_folder(out, gpu) / FOLDER) as partial:
        with gpu_lock(torch):
            print(f"timeline: {spec.name} ({which}): {', '.join(i for i, _ in chosen)}, {calls} calls each, under nsys "
                  f"{version}", flush=True)
            rep = nsys.capture(exe, partial / f"{stem}.nsys-rep", program, profiler_range=True, seconds=seconds,
                               env=nsys.clean_env(child_env()))
            capture = nsys.read(nsys.export(exe, rep))
        doc = _summarise(capture, chosen, calls, version, torch.version.cuda)
        doc.update(op=spec.name, shape=chosen_shape, dtype=chosen_dtype, which=which, gpu=gpu, torch=torch.__version__,
                   report=rep.name, seconds_limit=seconds,
                   started=dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"))
        write(partial, doc, capture, chosen)
        rep.with_suffix(".sqlite").unlink(missing_ok=True)   # the report holds it all; the export is remade on demand
    return partial.with_name(FOLDER)


def _summarise(capture: nsys.Capture, chosen: list[tuple[str, str]], calls: int, version: str,
               cuda: str | None) -> dict[str, Any]:
    """Per implementation: its calls' kernels; a capture that lost kernels is refused, never summarised."""
    if not capture.kernels:
        raise ProfileError(f"nsys {version} recorded no kernel at all in the capture range: " +
                           nsys.lost_kernels_hint(version, cuda))
    impls: dict[str, Any] = {}
    for impl, role in chosen:
        found = timeline.calls_of(capture, impl)
        if len(found.calls) != calls:
            raise ProfileError(f"the capture holds {len(found.calls)} of {impl}'s {calls} calls (NVTX ranges lost): "
                               + nsys.lost_kernels_hint(version, cuda))
        empty = sum(1 for ks in found.kernels if not ks)
        if empty:
            raise ProfileError(f"nsys recorded no kernel for {empty} of {impl}'s {calls} calls (a CPU implementation, "
                               "or kernels lost): " + nsys.lost_kernels_hint(version, cuda))
        impls[impl] = {"role": role, **found.summary()}
    return {"nsys": {"version": version, "schema": capture.schema, "capture": "cudaProfilerStart/Stop",
                     "trace": list(nsys.TRACE)}, "warmup_calls": WARMUP, "calls": calls, "impls": impls}


def write(folder: Path, doc: dict[str, Any], capture: nsys.Capture, chosen: list[tuple[str, str]]) -> None:
    """timeline.json, summary.md and timeline.png of one capture."""
    (folder / "timeline.json").write_text(json.dumps(doc, indent=1) + "\n")
    lanes = []
    for impl, role in chosen:
        found = timeline.calls_of(capture, impl)
        i = found.median_call()
        call = found.calls[i]
        lanes.append(timeline.Lane(f"{impl} ({role}): the call of median wall time of {len(found.calls)} "
                                   f"({call.ns / 1e3:.1f} µs)", [call], found.kernels[i],
                                   call.start))
    timeline.picture(folder / "timeline.png", lanes, f"{_title(doc)} on {doc['gpu']}")
    (folder / "summary.md").write_text(markdown(doc))


#: Per pass: what the title adds after the dtype, and how the summary says the calls were made.
PASS_WORDS = {"forward": ("", ""),
              "backward": (", backward", ", through autograd as the bench times them (each backward's forward run "
                                         "before the flush, outside the call)"),
              "full": (", full pass", ", through autograd as the bench times them")}


def _title(doc: dict[str, Any]) -> str:
    """`softmax (rows=4096, cols=4096, float32)`, with `, backward` or `, full pass` for those passes."""
    dims = ", ".join(f"{k}={v}" for k, v in doc["shape"].items())
    return f"{doc['op']} ({dims}, {doc['dtype']}{PASS_WORDS[doc.get('which', 'forward')][0]})"


def markdown(doc: dict[str, Any]) -> str:
    which = doc.get("which", "forward")
    lines = [f"# Timeline: {_title(doc)} on {doc['gpu']}", "",
             f"Nsight Systems {doc['nsys']['version']} (export schema {doc['nsys']['schema']}), CUDA and NVTX traced, "
             f"only the measured calls captured (cudaProfilerStart/Stop, after {doc['warmup_calls']} warm-up calls "
             f"each); {doc['calls']} calls per implementation, each after an L2 flush, the GPU synchronised after each"
             f"{PASS_WORDS[which][1]}. "
             f"Report: `{doc['report']}` (open it in Nsight Systems); picture: `timeline.png`."
             + (f" Capture limited to {doc['seconds_limit']:g} s." if doc.get("seconds_limit") else ""), "",
             "| impl | kernels per call | GPU time per call | GPU idle between kernels | call start to first kernel "
             "| wall per call (to sync) | copies per call |", "|---|---:|---:|---:|---:|---:|---:|"]
    for impl, s in doc["impls"].items():
        lines.append(f"| {impl} ({s['role']}) | {s['kernels_per_call']:g} | {s['gpu_us_per_call']:,.1f} µs "
                     f"| {s['idle_us_per_call']:,.1f} µs | {s['first_kernel_us']:,.1f} µs | {s['call_us']:,.1f} µs "
                     f"| {s['copies_per_call']:g} |")
    lines += ["", "GPU idle between kernels: gaps inside a call between its first kernel's start and its last one's end "
              "(what fusing or a CUDA graph would remove). Call start to first kernel: the host's time (Python, "
              "dispatch, launch) before the GPU starts on the call. Medians over the calls."]
    for impl, s in doc["impls"].items():
        lines += ["", f"## {impl} ({s['role']})", "", *timeline.kernel_table(s["kernels"], per_call=True)]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = op_parser("python -m kernellab.nsight.op_timeline", __doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=CALLS, help=f"calls of each implementation (default {CALLS})")
    parser.add_argument("--seconds", type=float, help="stop the capture after this many seconds")
    args = parser.parse_args(argv)
    root = args.kernels.resolve() if args.kernels else KERNELS
    try:
        if args.launch:
            return launch(root, args.op, args.impl, json.loads(args.shape), args.dtype, args.calls, args.system,
                          args.which)
        folder = run(root, args.op, shape=args.shape, dtype=args.dtype, impls=args.impl, calls=args.calls,
                     system=args.system, seconds=args.seconds, out=args.out, which=args.which)
    except KernellabError as e:
        print(f"kernellab: {e}", file=sys.stderr)
        return e.exit_code
    print((folder / "summary.md").read_text(), end="")
    print(f"timeline: {shown(folder)}/ (summary.md, timeline.png, the .nsys-rep for Nsight Systems' GUI)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
