"""The researcher's inner loop, timed: edit a kernel source, rebuild, test against PyTorch.

Runs the op's tests (`pytest tests/test_kernels.py`, one op selected) three times in fresh
processes, with a fresh build cache:
  cold       nothing built yet: every source compiles
  edited     after touching only the op's kernel source (.cu, or the CPU op's kernel .cpp)
  unchanged  nothing changed: the build is a no-op and the library loads from the cache
and compares each with the cold run and with pytest's own start-up (collection only, timed
after one untimed collection so that cold disk caches do not count). Third-party pytest plugins
are not loaded (PYTEST_DISABLE_PLUGIN_AUTOLOAD=1): the loop needs none, and some take seconds.

With --watch, also the watcher (`python -m kernellab.watch`, what `invoke watch --native` runs) on a
copy of the op: started and waited for (its first result), then the kernel source is edited N times
(--edits, default 5), each a real content change that the compiler sees (a new constant, so neither
ninja nor ccache can skip it), and each edit is timed from the write to the watcher's result line.

    python benchmarks/devloop.py [--op NAME] [--json PATH] [--watch [--edits N]]

Goals (H100, native): edited <= 25% of cold and < 10 s; unchanged < 3 s plus pytest start-up;
watch (median save -> result) <= 2.0 s and <= 20% of cold.
"""
from __future__ import annotations

import argparse
import json
import os
import queue
import random
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from kernellab import ROOT, proc
from kernellab.ops import extensions, library


def select_exactly(name: str) -> str:
    """A -k expression that matches `name` and no op whose name merely contains it."""
    others = [s.name for s in library.discover() if name in s.name and s.name != name]
    return " and ".join([name, *(f"not {o}" for o in others)])


def kernel_source(op: library.OpSpec) -> Path:
    """The source a researcher edits: the first one that is not the binding."""
    kernels = [s for s in op.sources if s != "binding.cpp"]
    return op.path / (kernels[0] if kernels else op.sources[0])


def timed(argv: list[str], env: dict[str, str]) -> float:
    started = time.perf_counter()
    proc.run(argv, env=env, cwd=ROOT)
    return time.perf_counter() - started


def watch_figures(op: library.OpSpec, cache: str, edits: int, *, ready_timeout: float = 900,
                  edit_timeout: float = 300) -> tuple[list[float], dict[str, list[float]]]:
    """Seconds from writing the kernel source to the watcher's result, for `edits` edits of a copy of the op,
    and where they went, as the watcher says in its `time:` line (start, build, checks: one list each)."""
    with tempfile.TemporaryDirectory(prefix="kernellab-devloop-watch-") as tmp:
        kernels = Path(tmp) / "kernels"
        shutil.copytree(op.path, kernels / op.name)
        shutil.copytree(library.common_dir(op), kernels / "_common")
        source = kernels / op.name / kernel_source(op).name
        original = source.read_text()
        path = os.pathsep.join(p for p in (str(ROOT / "src"), os.environ.get("PYTHONPATH", "")) if p)
        env = {**os.environ, "KERNELLAB_CACHE": cache, "PYTHONPATH": path, "TERM": "dumb"}
        watcher = subprocess.Popen(
            [sys.executable, "-m", "kernellab.watch", "-k", op.name, "--kernels", str(kernels)], cwd=ROOT, env=env,
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            start_new_session=True,
        )
        try:
            lines = _Lines(watcher)
            status = lines.next_result(ready_timeout)
            if not status.startswith("PASS"):
                raise SystemExit(f"devloop: the watcher's first result is not a pass: {status}")
            seconds: list[float] = []
            phases: dict[str, list[float]] = {}
            for _ in range(edits):
                time.sleep(2.0)  # as between real saves: the watcher's next round is forked and prepared
                constant = random.randrange(1, 2**31)  # new content every time: neither ninja nor ccache skips it
                edited = original + f"\n[[maybe_unused]] static constexpr int kernellab_devloop_edit = {constant};\n"
                started = time.perf_counter()
                source.write_text(edited)
                status = lines.next_result(edit_timeout)
                seconds.append(time.perf_counter() - started)
                if not status.startswith("PASS"):
                    raise SystemExit(f"devloop: the watcher's result after an edit is not a pass: {status}")
                for name, value in lines.phases().items():
                    phases.setdefault(name, []).append(value)
            return seconds, phases
        finally:
            if watcher.poll() is None:
                os.killpg(watcher.pid, signal.SIGINT)
                try:
                    watcher.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    os.killpg(watcher.pid, signal.SIGKILL)
                    watcher.wait()


class _Lines:
    """A process's output lines, read on a thread so that every wait can have a timeout."""

    def __init__(self, process: subprocess.Popen):
        self.process, self.queue = process, queue.Queue()
        self.seen: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.queue.put(line)
        self.queue.put(None)

    def next_result(self, timeout: float) -> str:
        """The watcher's next status line (PASS/FAIL/ERROR/CRASH ...)."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                line = self.queue.get(timeout=max(0.01, deadline - time.monotonic()))
            except queue.Empty:
                raise SystemExit(f"devloop: no result from the watcher within {timeout:.0f} s") from None
            if line is None:
                last = "".join(self.seen[-8:])
                raise SystemExit(f"devloop: the watcher exited with code {self.process.wait()}; its last lines:\n{last}")
            self.seen.append(line)
            if re.match(r"^(PASS|FAIL|ERROR|CRASH) ", line):
                return line.strip()

    def phases(self) -> dict[str, float]:
        """The last round's `time:` line (`  time: start 0.05 s, build 1.10 s, ...`) as {phase: seconds}."""
        for line in reversed(self.seen[-4:]):
            if line.strip().startswith("time:"):
                return {m[0]: float(m[1]) for m in re.findall(r"(\w+) ([\d.]+) s", line)}
        return {}


def main(argv: list[str] | None = None) -> int:
    import torch

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--op", default="vector_add" if torch.cuda.is_available() else "rmsnorm_cpu",
                        help="the op to build and test (default: vector_add with a GPU, rmsnorm_cpu without)")
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    parser.add_argument("--watch", action="store_true",
                        help="also time the watcher: save -> result for edits of the kernel source")
    parser.add_argument("--edits", type=int, default=5, help="with --watch: how many edits to time (default 5)")
    args = parser.parse_args(argv)

    (op,) = [s for s in library.discover() if s.name == args.op] or [None]
    if op is None:
        parser.error(f"no op named {args.op!r}; the ops are: {', '.join(s.name for s in library.discover())}")
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
        if args.watch:
            figures["watch_samples_s"], phases = watch_figures(op, cache, args.edits)
            figures["watch_s"] = statistics.median(figures["watch_samples_s"])
            figures["watch_phases_s"] = {name: statistics.median(v) for name, v in phases.items()}

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
    if args.watch:
        watched = figures["watch_s"]
        goals["watch"] = watched <= 2.0 and watched <= 0.20 * cold
        samples = " ".join(f"{x:.2f}" for x in figures["watch_samples_s"])
        print(f"  watch: save -> result (median)  {watched:6.2f} s  {watched / cold:5.0%} of cold  "
              f"(goal <= 2.0 s and <= 20%: {'met' if goals['watch'] else 'MISSED'}); {len(figures['watch_samples_s'])} "
              f"edits: {samples} s")
        spent = ", ".join(f"{name} {v:.2f} s" for name, v in figures["watch_phases_s"].items())
        print(f"  watch: where it went (medians)  {spent}")
    if args.json:
        args.json.write_text(json.dumps({"op": op.name, **figures, "goals_met": goals}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
