"""One reproduction run's record, `results/recipes/<name>/<run>/`: the record itself (`run`: the one type Run, its
JSON, new, load, run_folder) and what it shows (`pages`: summary.md, claims.md, metrics.csv, the plots, --compare;
write, which writes them all). The names below are the ones callers use, as `record.NAME`.

run.json       provenance (kernellab.provenance: the image, the machine, the kernellab checkout; the sources and
               submodules, patches and packages), every command with its exit code, every case's metrics and sanity
               values, every claim's verdict
metrics.csv    one row per case and metric (median of the repeats)
claims.md      the claims table; summary.md the whole run in one page; claims.png measured against claimed
raw/           every command's output, one file per case and repeat
"""
from .pages import claims_table, compare, plot, plot_metrics, salvage, summary, write
from .run import FORMAT, RESULTS, Run, load, machine_json, new, run_folder

__all__ = ["FORMAT", "RESULTS", "Run", "claims_table", "compare", "load", "machine_json", "new", "plot", "plot_metrics",
           "run_folder", "salvage", "summary", "write"]
