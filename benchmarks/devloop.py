"""The researcher's inner loop, timed: edit a kernel source, rebuild, test against PyTorch.

Runs the op's tests (`pytest tests/test_kernels.py`, one op selected) three times in fresh
processes, with a fresh build cache:
  cold       nothing built yet: every source compiles
  edited     after touching only the op's kernel source (.cu, or the CPU op's kernel .cpp)
  unchanged  nothing changed: the build is a no-op and the library loads from the cache
and compares each with the cold run and with pytest's own start-up (collection only, timed
after one untimed collection so that cold disk caches do not count). Third-party pytest plugins
are not loaded (PYTEST_DISABLE_PLUGIN_AUTOLOAD=1): the loop needs none, and some take seconds.

    python benchmarks/devloop.py [--op NAME] [--json PATH]

Goals (H100, native): edited <= 25% of cold and < 10 s; unchanged < 3 s plus pytest start-up.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from kernellab import ROOT, extensions, ops, proc


def select_exactly(name: str) -> str:
    """A -k expression that matches `name` and no op whose name merely contains it."""
    others = [s.name for s in ops.discover() if name in s.name and s.name != name]
    return " and ".join([name, *(f"not {o}" for o in others)])


def kernel_source(op: ops.OpSpec) -> Path:
    """The source a researcher edits: the first one that is not the binding."""
    kernels = [s for s in op.sources if s != "binding.cpp"]
    return op.path / (kernels[0] if kernels else op.sources[0])


def timed(argv: list[str], env: dict[str, str]) -> float:
    started = time.perf_counter()
    proc.run(argv, env=env, cwd=ROOT)
    return time.perf_counter() - started


def main(argv: list[str] | None = None) -> int:
    import torch

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--op", default="vector_add" if torch.cuda.is_available() else "rmsnorm_cpu",
                        help="the op to build and test (default: vector_add with a GPU, rmsnorm_cpu without)")
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    args = parser.parse_args(argv)

    (op,) = [s for s in ops.discover() if s.name == args.op] or [None]
    if op is None:
        parser.error(f"no op named {args.op!r}; the ops are: {', '.join(s.name for s in ops.discover())}")
    if op.kind == "triton":
        parser.error(f"{op.name} is a Triton op: it has no build step to time")
    source = kernel_source(op)
    pytest = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/test_kernels.py"]

    with tempfile.TemporaryDirectory(prefix="kernellab-devloop-") as cache:
        env = {"KERNELLAB_CACHE": cache, "KERNELLAB_OPS": select_exactly(op.name),
               "KERNELLAB_REQUIRE_GPU": "1" if op.needs_gpu else "0", "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
        timed([*pytest, "--collect-only"], env)  # warm the disk cache: torch's first import reads ~1 GB
        figures = {"startup_s": timed([*pytest, "--collect-only"], env)}
        figures["cold_s"] = timed(pytest, env)
        os.utime(source)  # "touch": a new mtime, as an editor's save gives
        figures["edited_s"] = timed(pytest, env)
        figures["unchanged_s"] = timed(pytest, env)

    cold, edited, unchanged, startup = (figures[k] for k in ("cold_s", "edited_s", "unchanged_s", "startup_s"))
    # The build's own share: each run minus the unchanged rerun (start-up, loading and tests are in all three).
    figures["cold_build_s"], figures["edited_build_s"] = cold - unchanged, edited - unchanged
    goals = {"edited": edited <= 0.25 * cold and edited < 10, "unchanged": unchanged < 3 + startup}
    jobs = os.environ.get("MAX_JOBS") or extensions.max_jobs()
    print(f"devloop: {op.name}, touching {source.relative_to(ROOT)}; MAX_JOBS={jobs}, torch {torch.__version__}")
    print(f"  pytest start-up (collect only)  {startup:6.1f} s")
    print(f"  cold build + test               {cold:6.1f} s")
    print(f"  edited kernel, rebuild + test   {edited:6.1f} s  {edited / cold:5.0%} of cold  "
          f"(goal <= 25% and < 10 s: {'met' if goals['edited'] else 'MISSED'})")
    print(f"  unchanged rerun + test          {unchanged:6.1f} s  {unchanged / cold:5.0%} of cold  "
          f"(goal < 3 s + start-up = {3 + startup:.1f} s: {'met' if goals['unchanged'] else 'MISSED'})")
    cold_build, edited_build = figures["cold_build_s"], figures["edited_build_s"]
    print(f"  build alone (run - unchanged):  cold {cold_build:.1f} s, edited {edited_build:.1f} s "
          f"= {edited_build / max(cold_build, 1e-9):.0%} of cold")
    if args.json:
        args.json.write_text(json.dumps({"op": op.name, **figures, "goals_met": goals}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
