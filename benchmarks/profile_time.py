"""Profile benchmark: how long `invoke profile -k OP --set basic` takes per profiled kernel, natively and in a
target's container, and whether Nsight Compute's DRAM throughput agrees with the benchmark's.

    python benchmarks/profile_time.py [--op softmax] [--target gpuhost] [--gpu-mode devices]
                                      [--no-native] [--agreement] [--json PATH]

Each way runs the task as a user would (`python -m invoke profile ...`, a fresh process, the op already
built), timed from the command's start to its end; the per-kernel figure divides that wall time by the
number of kernels profiled (candidate and baselines). ncu's own share is in profile.json (`seconds`).

--agreement also runs `invoke bench -k OP --quick --native` and compares, for the candidate at the same
shape and dtype, ncu's DRAM bytes per second ÷ the bench's measured copy bandwidth with the bench's own
% of peak (its bytes ÷ median time ÷ the same copy bandwidth). Goal: within 10% of each other. ncu
locks clocks to base and flushes caches before the kernel; the bench runs at boost clocks with L2
flushed per sample, so a few percent apart is expected.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def invoke(*argv: str) -> tuple[float, subprocess.CompletedProcess]:
    t0 = time.perf_counter()
    result = subprocess.run([sys.executable, "-m", "invoke", *argv], cwd=ROOT, capture_output=True, text=True)
    return time.perf_counter() - t0, result


def profile_once(op: str, way: list[str], out: Path) -> dict[str, Any]:
    seconds, result = invoke("profile", "-k", op, "--set", "basic", "--out", str(out), *way)
    if result.returncode != 0:
        sys.exit(f"profile {' '.join(way)} failed:\n{result.stdout[-2000:]}{result.stderr[-2000:]}")
    doc = json.loads((out / "profile" / "profile.json").read_text())
    kernels = sum(len(i["kernels"]) for i in doc["impls"].values())
    return {"wall_s": round(seconds, 1), "kernels": kernels, "per_kernel_s": round(seconds / kernels, 2),
            "ncu_s": doc["seconds"], "doc": doc}


def agreement(op: str, profiled: dict[str, Any], out: Path) -> dict[str, Any]:
    _, result = invoke("bench", "-k", op, "--quick", "--native", "--out", str(out))
    if result.returncode != 0:
        sys.exit(f"bench failed:\n{result.stdout[-2000:]}{result.stderr[-2000:]}")
    bench = json.loads((out / "results.json").read_text())
    doc = profiled["doc"]
    candidate = next(name for name, info in doc["impls"].items() if info["role"] == "candidate")
    row = next(r for r in bench["rows"] if r["op"] == op and r["impl"] == candidate and r["shape"] == doc["shape"]
               and r["dtype"] == doc["dtype"])
    peak = bench["peaks"]["copy_gbps"]
    ncu_gbps = doc["impls"][candidate]["kernels"][0]["dram_gbps"]
    ncu_pct, bench_pct = 100 * ncu_gbps / peak, row["pct_peak"]
    return {"impl": candidate, "copy_peak_gbps": round(peak, 1), "ncu_dram_gbps": round(ncu_gbps, 1),
            "bench_gbps": round(row["gbps"], 1), "ncu_pct_of_peak": round(ncu_pct, 1),
            "bench_pct_of_peak": round(bench_pct, 1), "relative_difference": round(abs(ncu_pct - bench_pct) / bench_pct, 3),
            "met": abs(ncu_pct - bench_pct) / bench_pct <= 0.10}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--op", default="softmax")
    p.add_argument("--target", help="also in this target's container (e.g. gpuhost)")
    p.add_argument("--gpu-mode", help="how that container gets the GPU")
    p.add_argument("--no-native", action="store_true")
    p.add_argument("--agreement", action="store_true")
    p.add_argument("--json", type=Path)
    args = p.parse_args()
    report: dict[str, Any] = {"op": args.op}
    with tempfile.TemporaryDirectory(dir=ROOT / "results", prefix=".profile-bench-") as tmp:
        os.chmod(tmp, 0o755)
        if os.getuid() == 0 and "SUDO_UID" in os.environ:  # the container runs as that user: let it write here
            os.chown(tmp, int(os.environ["SUDO_UID"]), int(os.environ.get("SUDO_GID", os.environ["SUDO_UID"])))
        ways = ([("native", ["--native"])] if not args.no_native else []) + \
               ([("container", ["--target", args.target, *(["--gpu-mode", args.gpu_mode] if args.gpu_mode else [])])]
                if args.target else [])
        for name, way in ways:
            report[name] = profile_once(args.op, way, Path(tmp) / name)
            r = report[name]
            print(f"{name:9s}: {r['kernels']} kernels in {r['wall_s']:.1f} s = {r['per_kernel_s']:.1f} s per kernel "
                  f"(ncu and the op's runs {r['ncu_s']:.1f} s)", flush=True)
        if "native" in report and "container" in report:
            ratio = report["container"]["per_kernel_s"] / report["native"]["per_kernel_s"]
            report["container_vs_native"] = round(ratio, 2)
            print(f"container / native per kernel: {ratio:.2f}x")
        if args.agreement and "native" in report:
            a = report["agreement"] = agreement(args.op, report["native"], Path(tmp) / "bench")
            print(f"agreement ({a['impl']}): ncu DRAM {a['ncu_dram_gbps']:.0f} GB/s = {a['ncu_pct_of_peak']:.1f}% of the "
                  f"measured copy peak {a['copy_peak_gbps']:.0f} GB/s; bench {a['bench_gbps']:.0f} GB/s = "
                  f"{a['bench_pct_of_peak']:.1f}%; {100 * a['relative_difference']:.1f}% apart "
                  f"(goal <= 10%: {'met' if a['met'] else 'MISSED'})")
    for way in ("native", "container"):
        report.get(way, {}).pop("doc", None)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=1) + "\n")
    return 0 if report.get("agreement", {}).get("met", True) else 1


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
