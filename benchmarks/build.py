"""Build benchmark: cold build, unchanged rebuild, and rebuild after editing a kernel file.

Kernels are mounted into containers, never copied into images: editing one must rebuild nothing
(same image ID, every step from cache). Figures are ratios to the cold build, from one run.

    python benchmarks/build.py [--target cpu] [--json results/build-bench.json]

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

from kernellab import ROOT, images, network


def timed_build(spec, **kw) -> tuple[float, images.Built, str]:
    log = io.StringIO()
    t0 = time.monotonic()
    built = images.build(spec, ca_certs=network.ca_certificates(), out=log, **kw)
    return time.monotonic() - t0, built, log.getvalue()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", default="cpu")
    ap.add_argument("--kernel", type=Path, default=ROOT / "kernels" / "vector_add" / "vector_add.cu",
                    help="the kernel file to edit for the third build")
    ap.add_argument("--json", type=Path, help="also write the figures here")
    args = ap.parse_args()
    spec = images.resolve_request(target=args.target)
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
