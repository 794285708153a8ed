"""Benchmarks you can trust and compare: correctness first, cold-cache CUDA-event timing,
measured rooflines, full environment stamps, and regression verdicts between runs.

`main(argv)` is the command line (`python -m kernellab.bench`); `timing.measure` is the engine.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..errors import KernellabError, UsageError
from .timing import DEFAULT, QUICK, Measurement, Settings, do_bench, measure, min_time_seconds

__all__ = ["DEFAULT", "QUICK", "Measurement", "Settings", "do_bench", "measure", "main"]


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m kernellab.bench", description=__doc__.splitlines()[0])
    p.add_argument("-k", dest="select", metavar="EXPR", help="only ops whose name matches EXPR")
    p.add_argument("--quick", action="store_true", help="first bench shape only, short measurements")
    p.add_argument("--out", type=Path, help="the run's folder (default results/<date>-<gpu>)")
    p.add_argument("--min-time", metavar="SECONDS",
                   help="measured time per function before it may stop (default 0.5, --quick 0.05); timeout 20x")
    p.add_argument("--compare", type=Path, metavar="OLD", help="compare with an earlier run (folder or results.json)")
    p.add_argument("--new", type=Path, metavar="NEW",
                   help="with --compare: compare two stored runs, measuring nothing")
    p.add_argument("--refresh-calibration", action="store_true", help="measure the roofline peaks again")
    p.add_argument("--system", metavar="JSON", help="a recipe's offer of baselines (written by `invoke bench --against`)")
    return p


def main(argv: list[str] | None = None) -> int:
    """Run (and/or compare) benchmarks; return the exit code: 1 on a significant regression."""
    args = parser().parse_args(argv)
    try:
        return _main(args)
    except KernellabError as e:
        print(f"kernellab: {e}", file=sys.stderr)
        return e.exit_code


def _main(args: argparse.Namespace) -> int:
    from . import compare, results, runner

    if args.new and not args.compare:
        raise UsageError("--new needs --compare OLD: it names the newer of two stored runs.")
    if args.new:
        new, folder = results.load(args.new), None
    else:
        options = runner.Options(select=args.select, quick=args.quick, out=args.out,
                                 refresh_calibration=args.refresh_calibration, system=args.system,
                                 min_time_s=None if args.min_time is None else min_time_seconds(args.min_time))
        new, folder = runner.run(options)
        print((folder / "summary.md").read_text())
        print(f"results in {folder}")
    if not args.compare:
        return 0
    report = compare.compare(results.load(args.compare), new)
    text = compare.to_markdown(report)
    if folder is not None:
        (folder / "compare.md").write_text(text)
    print(text)
    for line in report.environment:
        print(f"warning: environments differ: {line}", file=sys.stderr)
    if report.regressions:
        print(f"kernellab: {len(report.regressions)} significant regression(s) against {report.old_run}",
              file=sys.stderr)
        return 1
    return 0
