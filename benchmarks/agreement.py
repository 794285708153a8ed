"""Does our timing agree with triton.testing.do_bench, and with itself?

For each op (default vector_add and softmax), at its largest bench shape, in one process:
three rounds of [our median, do_bench's median], alternating so drift hits both alike.
Pass: our median of the three within 3% of do_bench's, and our three within 2% of each other.

    python benchmarks/agreement.py [--ops vector_add,softmax] [--dtype float32] [--out agreement.json]
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from kernellab.bench import timing
from kernellab.ops import library

ROUNDS = 3
AGREE = 0.03
REPEAT = 0.02


def check(spec: library.OpSpec, dtype: str) -> dict:
    import torch
    from triton.testing import do_bench

    module = library.load(spec)
    shape = max(spec.bench_shapes, key=lambda s: spec.bytes_moved(s, dtype))
    inputs = module.make_inputs(shape, dtype, "cuda", spec.seeds[0])
    name, kernel = next(iter(module.candidates.items()))
    torch.testing.assert_close(kernel(*inputs), module.reference(*inputs), check_dtype=False,
                               atol=spec.tolerances[dtype][0], rtol=spec.tolerances[dtype][1])
    fn = lambda: kernel(*inputs)
    ours, theirs = [], []
    for _ in range(ROUNDS):
        ours.append(timing.do_bench(fn).median_ms)
        theirs.append(do_bench(fn, warmup=100, rep=500, return_mode="median"))
    ours_median, theirs_median = statistics.median(ours), statistics.median(theirs)
    agreement = ours_median / theirs_median - 1.0
    spread = (max(ours) - min(ours)) / min(ours)
    return {"op": spec.name, "candidate": name, "shape": shape, "dtype": dtype,
            "ours_ms": ours, "do_bench_ms": theirs, "agreement": agreement, "spread": spread,
            "ok": abs(agreement) <= AGREE and spread <= REPEAT}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ops", default="vector_add,softmax")
    p.add_argument("--dtype", default="float32")
    p.add_argument("--out", type=Path)
    args = p.parse_args()
    specs = {s.name: s for s in library.discover()}
    rows = [check(specs[name], args.dtype) for name in args.ops.split(",")]
    print(f"{'op':<12} {'shape':<22} {'ours (3 runs, ms)':<30} {'do_bench (ms)':<30} agree  spread")
    for r in rows:
        shape = " ".join(f"{k}={v}" for k, v in r["shape"].items())
        print(f"{r['op']:<12} {shape:<22} {' '.join(f'{x:.4f}' for x in r['ours_ms']):<30} "
              f"{' '.join(f'{x:.4f}' for x in r['do_bench_ms']):<30} {r['agreement']:+.2%} {r['spread']:.2%}"
              f"  {'ok' if r['ok'] else 'FAIL'}")
    if args.out:
        args.out.write_text(json.dumps(rows, indent=1) + "\n")
    return 0 if all(r["ok"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
