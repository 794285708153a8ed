"""Recipe benchmark: `invoke recipe check`, a cold `recipe build`, and a second build with nothing changed.

Targets (issue 24): check at most 2 s, an unchanged build at most 5 s. Each is the wall time of the task as a
user types it (`python -m invoke recipe ...`: interpreter start-up included), the median of --repeat runs; the
cold build (--cold: every step again with --no-cache, the target's image and the fetched sources kept) once.

    python benchmarks/recipes.py [--recipe demo] [--target NAME] [--cold] [--repeat 5] [--json FILE]

A recipe whose sources are URLs fetches them through git's configuration: point it at a mirror first where the
host is out of reach (docs/recipes.md, "Sources on an isolated machine"). The demo's sources are its own folders.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def invoke(*args: str) -> float:
    """Seconds one `invoke recipe ...` took; its output is shown only when it fails."""
    t0 = time.monotonic()
    r = subprocess.run([sys.executable, "-m", "invoke", "recipe", *args], cwd=ROOT, capture_output=True, text=True)
    seconds = time.monotonic() - t0
    if r.returncode:
        sys.exit(f"`invoke recipe {' '.join(args)}` failed ({r.returncode}):\n{(r.stdout + r.stderr)[-3000:]}")
    return seconds


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--recipe", default="demo")
    p.add_argument("--target", default=None)
    p.add_argument("--cold", action="store_true", help="also time a build of every step (--no-cache)")
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--json", type=Path, default=None)
    a = p.parse_args()
    target = ["--target", a.target] if a.target else []
    figures: dict[str, float] = {}
    if a.cold:
        figures["cold_build_s"] = invoke("build", a.recipe, *target, "--no-cache")
    else:
        invoke("build", a.recipe, *target)  # make sure it is built: what follows times the unchanged case
    figures["check_s"] = statistics.median(invoke("check", a.recipe, *target) for _ in range(a.repeat))
    figures["unchanged_build_s"] = statistics.median(invoke("build", a.recipe, *target) for _ in range(a.repeat))
    print(f"recipe {a.recipe} on {os.uname().nodename} ({os.cpu_count()} cores), medians of {a.repeat}:")
    if "cold_build_s" in figures:
        print(f"  cold build (every step)     {figures['cold_build_s']:8.1f} s")
    print(f"  check                        {figures['check_s']:8.2f} s   target 2 s: {figures['check_s'] / 2:.2f}x "
          f"of it ({'met' if figures['check_s'] <= 2 else 'NOT met'})")
    print(f"  unchanged build              {figures['unchanged_build_s']:8.2f} s   target 5 s: "
          f"{figures['unchanged_build_s'] / 5:.2f}x of it ({'met' if figures['unchanged_build_s'] <= 5 else 'NOT met'})")
    if "cold_build_s" in figures:
        print(f"  unchanged / cold             {figures['unchanged_build_s'] / figures['cold_build_s']:8.3f}")
    if a.json:
        a.json.write_text(json.dumps({"recipe": a.recipe, "cores": os.cpu_count(), **figures}, indent=2) + "\n")


if __name__ == "__main__":
    main()
