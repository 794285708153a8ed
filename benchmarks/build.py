"""Build benchmark: cold build, unchanged rebuild, and rebuild after editing a kernel file.

Kernels are mounted into containers, never copied into images: editing one must rebuild nothing
(same image ID, every step from cache). Figures are ratios to the cold build, from one run.

    python benchmarks/build.py [--target cpu] [--json results/build-bench.json]
    python benchmarks/build.py --compare cpu,cu130-pip,cu124-debian [--bases bookworm,trixie] [--json FILE]

--compare: each target's cold build (--no-cache) time and image size, as ratios to the first target's.
--bases: each Debian base made twice (kernellab.image.debian): seconds per make, and whether the image ID repeats.

"Cold" rebuilds every layer (--no-cache); BuildKit's apt/pip cache mounts stay warm, as they
would on a developer's machine after the first build: the first-ever build is also reported
when this run makes the base image itself.
"""
from __future__ import annotations

import argparse
import io
import json
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from kernellab import ROOT, engine
from kernellab.image import builder, network


def timed_build(spec, **kw) -> tuple[float, builder.Built, str]:
    log = io.StringIO()
    t0 = time.monotonic()
    built = builder.build(spec, ca_certs=network.ca_certificates(), out=log, **kw)
    return time.monotonic() - t0, built, log.getvalue()


def compare(names: list[str], suites: list[str]) -> dict:
    """Cold build time and image size per target (ratios to the first), and each base made twice."""
    eng = engine.current().require()
    figures: dict = {"targets": {}, "bases": {}, "machine": {"cpus": os.cpu_count()}}
    for suite in suites:
        times, ids = [], []
        for _ in range(2):
            t0 = time.monotonic()
            tag = builder.make_debootstrap_base(suite, out=io.StringIO(), engine=eng)
            times.append(time.monotonic() - t0)
            ids.append(eng.image_id(tag))
        figures["bases"][suite] = {"seconds": times, "image_id": ids[0], "same_id": ids[0] == ids[1]}
        print(f"base {suite}: made twice in {times[0]:.1f} s and {times[1]:.1f} s; "
              f"same image ID: {'yes' if ids[0] == ids[1] else 'NO'} ({ids[0][7:19]})", flush=True)
    for name in names:
        spec = builder.resolve_request(target=name)
        with tempfile.TemporaryDirectory() as locks:
            seconds, built, _ = timed_build(spec, lock_dir=Path(locks), no_cache=True)
        size = int((eng.inspect(built.image_id) or {}).get("Size", 0))
        figures["targets"][name] = {"tag": spec.tag, "cold_s": seconds, "size_bytes": size}
        print(f"{name}: cold build {seconds:.0f} s, {size / 1e9:.2f} GB", flush=True)
    first = next(iter(figures["targets"].values()), None)
    if first:
        print(f"\n{'target':<16} {'cold build s':>12} {'ratio':>7} {'size GB':>8} {'ratio':>7}")
        for name, f in figures["targets"].items():
            print(f"{name:<16} {f['cold_s']:12.0f} {f['cold_s'] / first['cold_s']:7.2f} {f['size_bytes'] / 1e9:8.2f} "
                  f"{f['size_bytes'] / max(first['size_bytes'], 1):7.2f}")
    return figures


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--compare", help="comma-separated targets: cold build time and image size of each")
    ap.add_argument("--bases", default="", help="with --compare: comma-separated Debian suites, each base made twice")
    ap.add_argument("--target", default="cpu")
    ap.add_argument("--kernel", type=Path, default=ROOT / "kernels" / "vector_add" / "vector_add.cu",
                    help="the kernel file to edit for the third build")
    ap.add_argument("--json", type=Path, help="also write the figures here")
    args = ap.parse_args()
    if args.compare:
        figures = compare([t for t in args.compare.split(",") if t], [s for s in args.bases.split(",") if s])
        if args.json:
            args.json.parent.mkdir(parents=True, exist_ok=True)
            args.json.write_text(json.dumps(figures, indent=2) + "\n")
        return 0 if all(b["same_id"] for b in figures["bases"].values()) else 1
    spec = builder.resolve_request(target=args.target)
    with tempfile.TemporaryDirectory() as locks:
        lock_dir = Path(locks)
        print(f"target {args.target}: {spec.tag}", flush=True)
        cold, first, _ = timed_build(spec, lock_dir=lock_dir, no_cache=True)
        warm, second, warm_log = timed_build(spec, lock_dir=lock_dir)
        kernel = args.kernel.resolve()
        original = kernel.read_bytes()
        try:
            kernel.write_bytes(original + b"\n// edited by benchmarks/build.py\n")
            edited, third, _ = timed_build(spec, lock_dir=lock_dir)
        finally:
            kernel.write_bytes(original)
    rows = [("cold build (--no-cache)", cold, first.image_id), ("unchanged rebuild", warm, second.image_id),
            (f"rebuild after editing {kernel.relative_to(ROOT)}", edited, third.image_id)]
    print(f"\n{'build':<60} {'seconds':>8} {'ratio':>7}  image")
    for name, secs, iid in rows:
        print(f"{name:<60} {secs:8.1f} {secs / cold:7.3f}  {iid[7:19]}")
    same = second.image_id == third.image_id
    print(f"\nediting a kernel rebuilt nothing: {'yes' if same else 'NO'} (same image ID: {same})")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({
            "target": args.target, "tag": spec.tag, "cold_s": cold, "warm_s": warm, "edited_s": edited,
            "warm_ratio": warm / cold, "edited_ratio": edited / cold, "edit_rebuilt_nothing": same,
            "machine": {"cpus": os.cpu_count()},
        }, indent=2) + "\n")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
