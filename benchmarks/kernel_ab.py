"""Kernel A/B: the GPU time of one op's kernels in two versions of kernels/ (or more), side by side. What a kernel
writer asks after an edit, before a full bench: which kernels got faster, at which shapes, by how much.

    python benchmarks/kernel_ab.py -k layernorm [--pass backward] [--base HEAD] [--shapes 4x8192,16384x1024]
                                   [--dtypes float32,float16] [--calls 30] [--also TREE]... [--rounds 2] [--json PATH]

`--base` is a git revision (its kernels/ taken with `git archive`) or a folder holding a kernels/ tree; the other
side is this checkout's kernels/. `--also` (repeatable, a revision or a folder as --base) adds more versions, a
column each with its change against the base: scratch copies of the kernels, one idea each, compared in one run.
Each version is built and timed in a process of its own (all build at once, then each is timed alone), and each
(shape, dtype) is timed with torch.profiler: the L2 flushed before every call, the kernels' device time summed per
call (launch overhead is not in it), `--calls` calls; for an op of several kernels also each call's span, its first
kernel's start to its last one's end (the gaps between them in, overlaps counted once). `--rounds N` times every
version N times in turn and keeps each case's least time (and least span), so that a drift of the GPU's clocks
during the run falls on every version alike. Each version's result is checked against the reference first
(forward: the output; backward: every gradient), and its largest error printed beside its time: a scratch copy that
skips work (a bound, not a fix) shows it there. Below the times, a second table lists each kernel whose launches
differ between the versions (grid, block, registers, shared memory, the profiler's estimated occupancy): a change
that takes blocks off the GPU says so there.
The shapes default to the op's bench_shapes, the dtypes to its bench_dtypes. Needs a GPU.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tarfile
import tempfile
from io import BytesIO
from pathlib import Path
from typing import Any, Sequence

ROOT = Path(__file__).resolve().parents[1]

#: One side, in a process of its own: prints a JSON line per (shape, dtype).
MEASURE = r"""
import json, os, sys, tempfile
from pathlib import Path
sys.path.insert(0, sys.argv[1])
LAUNCH_KEYS = ("grid", "block", "registers per thread", "shared memory", "est. achieved occupancy %")
import torch
from kernellab.ops import library, spec as opspec
tree, op, which, calls = sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5])
cases = json.loads(sys.argv[6])
mod = library.load(opspec.parse_spec(Path(tree) / "kernels" / op / "op.toml"))
if calls == 0:  # build only
    sys.exit(0)
label = next(c for c in mod.candidates if which == "forward" or c in mod.backwards)  # the first that has it
flush = torch.empty(2 * torch.cuda.get_device_properties(0).L2_cache_size, dtype=torch.int8, device="cuda")
ignore = ("elementwise", "fill", "memset")  # the flush's and the allocator's own kernels
for shape, dtype in cases:
    inputs = mod.make_inputs(shape, dtype, "cuda", 0)
    out = mod.candidates[label](*inputs)
    if which == "backward":
        grad_out = mod.make_grad_out(out, 0)
        grads = mod.backwards[label](grad_out, *inputs, out=out)
        pairs = zip(grads, mod.reference_grads(inputs, grad_out))
        call = lambda: mod.backwards[label](grad_out, *inputs, out=out, grads=grads)
    else:
        pairs = [(out, mod.reference(*inputs))]
        call = lambda: mod.candidates[label](*inputs, out=out)
    error = max(float((a.float() - b.float()).abs().max()) for a, b in pairs)
    for _ in range(5):
        call()
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            flush.zero_()
            call()
        torch.cuda.synchronize()
    kernels = {}
    for e in prof.events():
        if e.device_type != torch.autograd.DeviceType.CUDA or any(w in e.name.lower() for w in ignore):
            continue
        us = e.device_time_total if hasattr(e, "device_time_total") else e.cuda_time_total  # torch < 2.4: cuda_
        kernels[e.name] = kernels.get(e.name, 0.0) + us
    kernels = {k: v / calls for k, v in kernels.items()}
    # Each call's span, from its first kernel's start to its last one's end (the flush between calls): the kernels'
    # times summed count twice what overlaps (a programmatic dependent launch) and leave out the gaps between them.
    spans, start, end = [], None, None
    for e in sorted((e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA),
                    key=lambda e: e.time_range.start):
        if any(w in e.name.lower() for w in ignore):
            if start is not None:
                spans.append(end - start)
            start = end = None
        else:
            start = e.time_range.start if start is None else start
            end = e.time_range.end if end is None else max(end, e.time_range.end)
    if start is not None:
        spans.append(end - start)
    # How each kernel was launched (the trace's launch records): what a change took away, e.g. blocks on the GPU.
    handle, trace = tempfile.mkstemp(suffix=".json")
    os.close(handle)
    try:
        prof.export_chrome_trace(trace)
        events = json.loads(Path(trace).read_text()).get("traceEvents", [])
    finally:
        Path(trace).unlink()
    launches = {}
    for e in events:
        if e.get("cat") == "kernel" and not any(w in e.get("name", "").lower() for w in ignore):
            record = {k: e.get("args", {}).get(k) for k in LAUNCH_KEYS}
            if record not in launches.setdefault(e["name"], []):
                launches[e["name"]].append(record)
    print(json.dumps({"shape": shape, "dtype": dtype, "us": sum(kernels.values()), "kernels": kernels,
                      "launches": launches,
                      # one span a call, or none (an op's own fill or memset between its kernels splits a call)
                      "span_us": sum(spans) / len(spans) if len(spans) == calls else None, "max_error": error}),
          flush=True)
"""


def parse_shapes(text: str) -> list[dict[str, int]]:
    """"4x8192,16384x1024" -> [{"rows": 4, "cols": 8192}, ...]."""
    shapes = []
    for part in filter(None, (p.strip() for p in text.split(","))):
        rows, sep, cols = part.partition("x")
        if not sep or not rows.isdigit() or not cols.isdigit():
            raise SystemExit(f"--shapes: {part!r} is not ROWSxCOLS (e.g. 4096x4096)")
        shapes.append({"rows": int(rows), "cols": int(cols)})
    return shapes


def export_base(base: str, into: Path, flag: str = "--base") -> Path:
    """A folder holding the base's kernels/: `base` itself when it is one, else that git revision's kernels/
    (extracted into `into`); `flag` names the argument in the error."""
    folder = Path(base)
    if (folder / "kernels").is_dir():
        return folder
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", "--format=tar", base, "kernels"],
                             capture_output=True)
    if archive.returncode != 0:
        raise SystemExit(f"{flag} {base}: neither a folder with kernels/ nor a git revision that has kernels/ "
                         f"({archive.stderr.decode(errors='replace').strip()})")
    with tarfile.open(fileobj=BytesIO(archive.stdout)) as tar:
        tar.extractall(into, filter="data") if hasattr(tarfile, "data_filter") else tar.extractall(into)
    return into


def short_name(kernel: str) -> str:
    """A kernel's name without its template arguments, parameters and namespace noise."""
    name = kernel.replace("void ", "").replace("(anonymous namespace)::", "")
    return name.split("<")[0].split("(")[0]


def table(base: list[dict[str, Any]], new: list[dict[str, Any]],
          others: Sequence[tuple[str, list[dict[str, Any]]]] = ()) -> str:
    """Markdown: per case, each side's kernel time (and kernels), the change, and each side's largest error; each of
    `others` (label, records) a column more, with its change against the base."""
    extra = "".join(f" {label} | change |" for label, _ in others)
    errors = "".join(f" / {label}" for label, _ in others)
    lines = [f"| rows x cols | dtype | base | this checkout | change |{extra} max error (base / this{errors}) |",
             "|---|---|---|---|---|" + "---|---|" * len(others) + "---|"]

    def cell(r: dict[str, Any]) -> str:
        if len(r["kernels"]) <= 1:
            return f"{r['us']:.2f} us"
        parts = " + ".join(f"{short_name(k)} {v:.2f}" for k, v in r["kernels"].items())
        span = f"; span {r['span_us']:.2f}" if r.get("span_us") else ""
        return f"{r['us']:.2f} us ({parts}{span})"

    def change(a: dict[str, Any], b: dict[str, Any]) -> str:
        out = f"{(b['us'] / a['us'] - 1) * 100:+.1f}%" if a["us"] else "n/a"
        if (len(a["kernels"]) > 1 or len(b["kernels"]) > 1) and a.get("span_us") and b.get("span_us"):
            out += f" (span {(b['span_us'] / a['span_us'] - 1) * 100:+.1f}%)"  # first start to last end, per call
        return out

    for i, (a, b) in enumerate(zip(base, new)):
        more = [records[i] for _, records in others]
        shape = f"{a['shape']['rows']}x{a['shape']['cols']}"
        cells = "".join(f" {cell(r)} | {change(a, r)} |" for r in more)
        errs = " / ".join(f"{r['max_error']:.3g}" for r in (a, b, *more))
        lines.append(f"| {shape} | {a['dtype']} | {cell(a)} | {cell(b)} | {change(a, b)} |{cells} {errs} |")
    return "\n".join(lines)


def launch_text(record: dict[str, Any]) -> str:
    """One launch record of the profiler's trace as a line: "264 x 512, 64 registers, 33.0 KB shared, 50% occupancy"."""
    def dims(v: Any) -> str:  # [264, 1, 1] -> "264", [128, 2, 1] -> "128 x 2", [1, 2, 1] -> "1 x 2"; None -> "?"
        if not isinstance(v, list):
            return "?" if v is None else str(v)
        while len(v) > 1 and v[-1] == 1:
            v = v[:-1]
        return " x ".join(str(d) for d in v)

    parts = [f"{dims(record.get('grid'))} blocks of {dims(record.get('block'))}"]
    if record.get("registers per thread") is not None:
        parts.append(f"{record['registers per thread']} registers")
    if record.get("shared memory") is not None:
        parts.append(f"{record['shared memory'] / 1024:.1f} KB shared")
    # The profiler's estimate says 0 for blocks of more than 48 KB of shared memory (which run all the same): left out.
    if record.get("est. achieved occupancy %"):
        parts.append(f"{record['est. achieved occupancy %']}% occupancy")
    return ", ".join(parts)


def launch_table(base: list[dict[str, Any]], new: list[dict[str, Any]],
                 others: Sequence[tuple[str, list[dict[str, Any]]]] = ()) -> str:
    """Markdown: each kernel whose launches differ between the versions (grid, block, registers, shared memory,
    occupancy), per case; a line saying so when none differ. A change that takes blocks off the GPU shows here."""
    labels = "".join(f" {label} |" for label, _ in others)
    lines = [f"| rows x cols | dtype | kernel | base | this checkout |{labels}",
             "|---|---|---|---|---|" + "---|" * len(others)]
    for i, (a, b) in enumerate(zip(base, new)):
        sides = [a, b, *(records[i] for _, records in others)]
        by_name: list[dict[str, str]] = []
        for r in sides:
            grouped: dict[str, set[str]] = {}  # kernels that share a short name (two instantiations) go together
            for name, records in (r.get("launches") or {}).items():
                grouped.setdefault(short_name(name), set()).update(launch_text(x) for x in records)
            by_name.append({key: " / ".join(sorted(texts)) for key, texts in grouped.items()})
        for name in dict.fromkeys(k for texts in by_name for k in texts):
            cells = [texts.get(name, "(none)") for texts in by_name]
            if len(set(cells)) > 1:
                shape = f"{a['shape']['rows']}x{a['shape']['cols']}"
                lines.append(f"| {shape} | {a['dtype']} | {name} | " + " | ".join(cells) + " |")
    if len(lines) == 2:
        return "Launches: the same in every version (grid, block, registers, shared memory, occupancy)."
    return "Launches that differ between the versions (torch.profiler's launch records):\n\n" + "\n".join(lines)


def best_of(rounds: list[list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """One version's records over several rounds: per case the round of least kernel time, its span the least of the
    rounds' (when each round has one)."""
    out = []
    for records in zip(*rounds):
        best = dict(min(records, key=lambda r: r["us"]))
        spans = [r.get("span_us") for r in records]
        if all(spans):
            best["span_us"] = min(spans)
        out.append(best)
    return out


def measure(tree: Path, op: str, which: str, calls: int, cases: list) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", MEASURE, str(ROOT / "src"), str(tree), op, which, str(calls),
                             json.dumps(cases)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONUNBUFFERED": "1"})


def collect(proc: subprocess.Popen, side: str) -> list[dict[str, Any]]:
    out, err = proc.communicate()
    if proc.returncode != 0:
        raise SystemExit(f"{side} failed (exit {proc.returncode}):\n{err[-3000:]}")
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-k", dest="op", required=True, help="the op (a folder under kernels/)")
    ap.add_argument("--pass", dest="which", choices=["forward", "backward"], default="forward")
    ap.add_argument("--base", default="HEAD", help="a git revision or a folder holding kernels/ (default HEAD)")
    ap.add_argument("--shapes", help="ROWSxCOLS,... (default: the op's bench_shapes)")
    ap.add_argument("--dtypes", help="dtype,... (default: the op's bench_dtypes)")
    ap.add_argument("--calls", type=int, default=30, help="timed calls per case (at least 1)")
    ap.add_argument("--also", action="append", default=[], metavar="TREE",
                    help="one more version to time beside them (repeatable): a revision or a folder holding kernels/")
    ap.add_argument("--rounds", type=int, default=1, help="time every version this many times in turn; keep the best")
    ap.add_argument("--json", type=Path, help="also write every version's records here")
    args = ap.parse_args(argv)
    if args.calls < 1:
        raise SystemExit("--calls: at least 1.")
    if args.rounds < 1:
        raise SystemExit("--rounds: at least 1.")
    args.also = list(dict.fromkeys(args.also))  # a version named twice is timed once
    sys.path.insert(0, str(ROOT / "src"))
    from kernellab.errors import ConfigError
    from kernellab.ops import spec as opspec

    if not (ROOT / "kernels" / args.op / "op.toml").is_file():
        raise SystemExit(f"-k {args.op}: no such op; ops: {', '.join(opspec.op_names(ROOT / 'kernels'))}.")
    try:
        spec = opspec.parse_spec(ROOT / "kernels" / args.op / "op.toml")
    except ConfigError as e:
        raise SystemExit(str(e)) from None
    if args.which == "backward" and spec.backward is None:
        raise SystemExit(f"{args.op} has no backward (no [backward] in its op.toml): use --pass forward.")
    shapes = parse_shapes(args.shapes) if args.shapes else list(spec.bench_shapes)
    dtypes = args.dtypes.split(",") if args.dtypes else list(spec.bench_dtypes)
    cases = [[shape, dtype] for shape in shapes for dtype in dtypes]
    with tempfile.TemporaryDirectory(prefix="kernel-ab-") as tmp:
        # Every version's kernels/ first (a bad revision is one sentence on any machine), then the GPU.
        trees = {f"--base {args.base}": export_base(args.base, Path(tmp) / "base"), "this checkout": ROOT}
        for i, also in enumerate(args.also):
            trees[f"--also {also}"] = export_base(also, Path(tmp) / f"also{i}", "--also")
        import torch

        if not torch.cuda.is_available():
            raise SystemExit(f"kernel_ab times GPU kernels: torch {torch.__version__} sees no GPU here.")
        # Every version builds at once; then each is timed alone, so that none shares the GPU with another.
        builds = {side: measure(tree, args.op, args.which, 0, cases) for side, tree in trees.items()}
        for side, proc in builds.items():
            collect(proc, side)
        rounds: dict[str, list[list[dict[str, Any]]]] = {side: [] for side in trees}
        for _ in range(args.rounds):
            for side, tree in trees.items():
                rounds[side].append(collect(measure(tree, args.op, args.which, args.calls, cases), side))
    base, new, *more = (best_of(r) for r in rounds.values())
    others = list(zip(args.also, more))
    also = "".join(f", {a}" for a in args.also)
    best = f"; the least of {args.rounds} rounds, the versions in turn" if args.rounds > 1 else ""
    print(f"{args.op} {args.which}: kernel time per call (torch.profiler, L2 flushed), base {args.base} against "
          f"this checkout{also}{best}\n")
    print(table(base, new, others))
    print()
    print(launch_table(base, new, others))
    if args.json:
        args.json.write_text(json.dumps({"op": args.op, "pass": args.which, "base": args.base, "rounds": args.rounds,
                                         "sides": {"base": base, "this": new, "also": dict(others)}}, indent=1))


if __name__ == "__main__":
    main()
