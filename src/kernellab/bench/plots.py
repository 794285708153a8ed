"""speedup.png and roofline.png for a run, cross_gpu.png for a merged one (matplotlib, Agg backend).

Importing this module imports matplotlib; the runner imports it lazily and goes on without plots
(saying so) where matplotlib is missing.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

import matplotlib
import matplotlib.ticker

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from . import results


def write(folder: Path, doc: dict[str, Any]) -> list[Path]:
    """Write speedup.png and roofline.png into folder; return their paths."""
    paths = [folder / "speedup.png", folder / "roofline.png"]
    speedup(doc, paths[0])
    roofline(doc, paths[1])
    return paths


def _label(row: dict[str, Any]) -> str:
    return f"{row['op']} {results.shape_label(row['shape'])} {row['dtype']} [{results.impl_label(row)}]"


def speedup(doc: dict[str, Any], path: Path) -> None:
    """Horizontal bars: each candidate at each shape against each baseline, with its 95% interval."""
    rows = [r for r in doc["rows"] if r.get("speedups")]
    bases = results.baseline_names(doc)
    fig, ax = plt.subplots(figsize=(10, max(3.0, 1.2 + 0.3 * len(rows) * max(1, len(bases)) ** 0.5)))
    height = 0.8 / max(1, len(bases))
    for j, base in enumerate(bases):
        ys: list[float] = []
        values: list[float] = []
        errs: list[list[float]] = [[], []]  # below and above each bar
        for i, row in enumerate(rows):
            ratio = row["speedups"].get(base)
            if ratio:
                ys.append(i + j * height)
                values.append(ratio["value"])
                errs[0].append(ratio["value"] - ratio["lo"])
                errs[1].append(ratio["hi"] - ratio["value"])
        system = (doc.get("systems") or {}).get(base)
        ax.barh(ys, values, height=height, xerr=errs, capsize=2,
                label=f"vs {system['label'] if system else base}")
    ax.axvline(1.0, color="black", linewidth=0.8)
    # Speedups span 0.03x to 12x in one run: a log axis keeps 0.5x and 2x equally far from 1.
    ax.set_xscale("log")
    ax.xaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda x, _: f"{x:g}x"))
    ax.set_yticks([i + 0.4 - height / 2 for i in range(len(rows))])
    ax.set_yticklabels([_label(r) for r in rows], fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("speedup (baseline median / candidate median), 95% bootstrap interval")
    ax.set_title(f"kernellab bench {doc['run']}" + ("" if rows else ": no candidate was timed"))
    if bases:
        ax.legend(fontsize=7, loc="lower right")
    fig.savefig(path, dpi=120, bbox_inches="tight")
    plt.close(fig)


def roofline(doc: dict[str, Any], path: Path) -> None:
    """Log-log TFLOP/s against FLOPs per byte, under the measured copy and GEMM roofs."""
    peaks = doc.get("peaks")
    # Under GPU roofs, CPU-timed rows (a CPU op in a GPU run) would only mislead.
    rows = [r for r in doc["rows"] if r.get("tflops") and r.get("bytes")
            and (not peaks or r.get("timer") == "cuda-events")]
    fig, ax = plt.subplots(figsize=(8, 5.5))
    intensities = [r["flops"] / r["bytes"] for r in rows] or [1.0]
    lo, hi = min(intensities + [0.1]) / 2, max(intensities + [1000.0]) * 2
    if peaks:
        bw_tbs = peaks["copy_gbps"] / 1e3
        for dtype, tflops in peaks["gemm_tflops"].items():
            knee = tflops / bw_tbs
            ax.plot([lo, knee, hi], [lo * bw_tbs, tflops, tflops], linewidth=1, label=f"roof {dtype}")
    ops = sorted({r["op"] for r in rows})
    colors = {op: plt.cm.tab10(i % 10) for i, op in enumerate(ops)}
    for r in rows:
        candidate = r["role"] == "candidate"
        ax.scatter(r["flops"] / r["bytes"], r["tflops"], s=28 if candidate else 18,
                   color=colors[r["op"]] if candidate else "none", edgecolors=colors[r["op"]],
                   marker="o" if candidate else "s")
    for op in ops:
        ax.scatter([], [], color=colors[op], label=op)
    ax.scatter([], [], color="none", edgecolors="gray", marker="s", label="baselines (hollow)")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(lo, hi)
    if not rows and not peaks:
        ax.set_ylim(1e-3, 1e3)  # nothing to draw (every op skipped on a CPU run): a log axis still needs a range
    ax.set_xlabel("arithmetic intensity (FLOP / byte moved)")
    ax.set_ylabel("TFLOP/s")
    gpu = (doc["environment"].get("gpu") or {}).get("name", "no GPU")
    ax.set_title(f"roofline, {gpu}" + ("" if peaks else " (no measured peaks: CPU run)"))
    ax.legend(fontsize=7, loc="lower right")
    ax.grid(True, which="both", linewidth=0.3)
    fig.savefig(path, dpi=120, bbox_inches="tight")
    plt.close(fig)


def cross_gpu(docs: Mapping[str, dict[str, Any]], path: Path, *, title: str) -> None:
    """Grouped horizontal bars: each candidate's speedup over each baseline, one bar per GPU type."""
    types = list(docs)
    rows = {t: {_key(r): r for r in doc["rows"]} for t, doc in docs.items()}
    missing = {t: {g["op"] for g in doc.get("missing") or []} for t, doc in docs.items()}
    keys: list[tuple[str, ...]] = []
    bases: list[str] = []
    for doc in docs.values():
        keys += [k for k, r in ((_key(r), r) for r in doc["rows"]) if r["role"] == "candidate" and k not in keys]
        bases += [b for b in results.baseline_names(doc) if b not in bases]
    labels = [f"{op} {shape} {dtype} [{impl if which == 'forward' else f'{impl} {which}'}]"
              for op, shape, dtype, which, impl in keys]
    # One panel per baseline: a speedup over eager and one over torch.compile are different questions.
    panels = bases or ["eager"]
    height = 0.8 / max(1, len(types))
    fig, axes = plt.subplots(len(panels), 1, squeeze=False,
                             figsize=(10, len(panels) * max(2.5, 1.0 + 0.25 * len(keys) * len(types))))
    for ax, base in zip(axes[:, 0], panels):
        for j, gpu_type in enumerate(types):
            ys: list[float] = []
            values: list[float] = []
            errs: list[list[float]] = [[], []]  # below and above each bar
            for i, key in enumerate(keys):
                # An op skipped or broken as a whole on a type has one row for all its implementations.
                row = rows[gpu_type].get(key) or rows[gpu_type].get(key[:4] + ("all",))
                ratio = ((row or {}).get("speedups") or {}).get(base)
                y = i + j * height
                if ratio:
                    ys.append(y)
                    values.append(ratio["value"])
                    errs[0].append(ratio["value"] - ratio["lo"])
                    errs[1].append(ratio["hi"] - ratio["value"])
                else:  # say why there is no bar, so a gap is not read as "no speedup"
                    why = row["status"] if row and row["status"] != "ok" else (
                        "missing task" if key[0] in missing[gpu_type] else "no result")
                    ax.text(1.0, y, f" {gpu_type}: {why}", va="center", fontsize=6, color="gray")
            # Bars grow from 1x, so a slowdown points left and a speedup right.
            ax.barh(ys, [v - 1.0 for v in values], left=1.0, height=height, xerr=errs, capsize=2, label=gpu_type,
                    color=plt.cm.tab10(j % 10))
        ax.axvline(1.0, color="black", linewidth=0.8)
        if not ax.patches:
            ax.set_xlim(0.5, 2.0)  # nothing timed: a log axis still needs a range
        # As in speedup(): speedups span orders of magnitude, and 0.5x and 2x should sit equally far from 1.
        ax.set_xscale("log")
        for set_formatter in (ax.xaxis.set_major_formatter, ax.xaxis.set_minor_formatter):
            set_formatter(matplotlib.ticker.FuncFormatter(lambda x, _: f"{x:g}x"))  # not 2x10^0
        ax.set_yticks([i + 0.4 - height / 2 for i in range(len(keys))])
        ax.set_yticklabels(labels, fontsize=7)
        ax.invert_yaxis()
        ax.set_xlabel(f"speedup vs {base} (baseline median / candidate median on the same GPU), 95% interval")
        ax.legend(fontsize=7, loc="lower right", title="GPU type", title_fontsize=7)
    axes[0, 0].set_title(title + ("" if keys else ": no candidate was timed"))
    fig.savefig(path, dpi=120, bbox_inches="tight")
    plt.close(fig)


def _key(row: dict[str, Any]) -> tuple[str, ...]:
    return results.row_key(row)  # (op, shape, dtype, pass, impl)
