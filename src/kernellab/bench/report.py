"""A bench run's folder as people read it: results.json, results.csv and summary.md (kernellab.bench.results),
then the plots (kernellab.bench.plots, where matplotlib is installed; without it the run says so)."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from . import results


def write(folder: Path, doc: dict[str, Any]) -> None:
    results.write(folder, doc)
    try:
        from . import plots  # matplotlib is optional: imported only here, where its absence is handled
    except ImportError as e:
        doc["warnings"].append(f"no plots: {e.name} is not installed")
        results.write(folder, doc)
        return
    plots.write(folder, doc)
