"""What a .cu edit costs to rebuild, with the op's .cu files in a library of their own (what `invoke
watch` builds: extensions.build(kernel_library=True)) against one library with the binding (what `invoke
test` builds). Needs a CUDA build of torch and nvcc, not a GPU: run it natively on the GPU machine or in
a CUDA image (`invoke shell --target cu124-debian --cmd 'python benchmarks/kernel_library.py'`).

Each build runs in a fresh process, as each watch round does, on a copy of the op whose kernel source
gets a real content change before every build (a new constant: neither ninja nor a compiler cache can
skip it); the two layouts alternate, so that drift on a busy machine hits both alike.

    python benchmarks/kernel_library.py [--op vector_add,softmax] [--edits 5] [--arch 9.0]

Prints, per op, the median rebuild of each layout and their ratio.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

#: One build in a fresh process; prints {"s": seconds in library.build, "library_mtime": the loaded library's}.
BUILD = r"""
import json, sys, time
sys.path.insert(0, sys.argv[1])
from kernellab.ops import library, spec as opspec
from pathlib import Path
spec = opspec.parse_spec(Path(sys.argv[2]) / "op.toml")
t = time.perf_counter()
b = library.build(spec, kernel_library=sys.argv[3] == "split")
print(json.dumps({"s": time.perf_counter() - t, "library_mtime": b.library.stat().st_mtime_ns}))
"""


def build(op_dir: Path, layout: str, env: dict[str, str]) -> dict:
    done = subprocess.run([sys.executable, "-c", BUILD, str(ROOT / "src"), str(op_dir), layout],
                          capture_output=True, text=True, env=env)
    if done.returncode != 0:
        sys.exit(f"building {op_dir.name} ({layout}) failed:\n{done.stdout[-2000:]}{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def edit(op_dir: Path, n: int) -> None:
    cu = sorted(op_dir.glob("*.cu"))[0]
    text = cu.read_text().split("\n// kernellab-bench-edit")[0]
    cu.write_text(f"{text}\n// kernellab-bench-edit\nstatic constexpr int kKernellabBenchEdit = {n};\n")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--op", default="vector_add,softmax")
    p.add_argument("--edits", type=int, default=5)
    p.add_argument("--arch", default=os.environ.get("TORCH_CUDA_ARCH_LIST") or "9.0",
                   help="TORCH_CUDA_ARCH_LIST for the builds (default: the environment's, else 9.0)")
    args = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="kl-kernlib-") as tmp:
        work = Path(tmp)
        shutil.copytree(ROOT / "kernels", work / "kernels")
        env = {**os.environ, "KERNELLAB_CACHE": str(work / "cache"), "TORCH_CUDA_ARCH_LIST": args.arch}
        print(f"rebuild after a one-.cu edit, median of {args.edits}, fresh process each, TORCH_CUDA_ARCH_LIST={args.arch}")
        for name in args.op.split(","):
            op_dir = work / "kernels" / name
            times: dict[str, list[float]] = {"split": [], "one": []}
            bindings: dict[str, set[int]] = {"split": set(), "one": set()}
            for layout in times:  # the cold builds, not timed
                bindings[layout].add(build(op_dir, layout, env)["library_mtime"])
            for i in range(args.edits):
                edit(op_dir, i)
                for layout in times:
                    r = build(op_dir, layout, env)
                    times[layout].append(r["s"])
                    bindings[layout].add(r["library_mtime"])
            split, one = statistics.median(times["split"]), statistics.median(times["one"])
            print(f"{name:12s} kernels in their own library {split:6.2f} s   one library {one:6.2f} s   "
                  f"ratio {split / one:.2f}   (the loaded library relinked {len(bindings['split']) - 1} and "
                  f"{len(bindings['one']) - 1} times of {args.edits})")

if __name__ == "__main__":
    main()
