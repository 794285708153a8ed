"""Where the GPU time went, from one Nsight Systems capture (kernellab.nsight.nsys.Capture): tables and a picture.

A kernel belongs to an NVTX range when the API call that launched it ran inside the range on the same thread (the
CPU time of the launch, not the GPU time of the kernel: a kernel may run after its range has closed). From that:
the kernels of a range, grouped by name (launches, GPU time, share), the GPU's idle time between kernels inside a
range (launch gaps), the NVTX table (each range name: count, CPU time, the GPU time of the kernels it launched),
the top kernels of a whole program, and the timeline picture (matplotlib, Agg): NVTX ranges above the kernels they
launched, on one time axis per lane. `invoke profile --timeline` and `invoke recipe profile` both use it.
"""
from __future__ import annotations

import statistics
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Sequence

from .nsys import Capture, Copy, Kernel, Range


def within(kernels: Iterable[Kernel], rng: Range) -> list[Kernel]:
    """The kernels launched inside `rng` (by the launching call's CPU time, on the range's thread when known)."""
    out = []
    for k in kernels:
        at = k.launched if k.launched is not None else k.start
        if rng.start <= at <= rng.end and (k.thread is None or rng.thread is None or k.thread == rng.thread):
            out.append(k)
    return out


def copies_within(copies: Iterable[Copy], rng: Range) -> list[Copy]:
    return [c for c in copies if rng.start <= c.start <= rng.end]


def busy_ns(kernels: Sequence[Kernel]) -> int:
    """GPU time covered by at least one of `kernels` (overlapping kernels counted once)."""
    total, reach = 0, None
    for k in sorted(kernels, key=lambda k: k.start):
        if reach is None or k.start >= reach:
            total += k.ns
            reach = k.end
        elif k.end > reach:
            total += k.end - reach
            reach = k.end
    return total


def idle_ns(kernels: Sequence[Kernel]) -> int:
    """The GPU's idle time between the first kernel's start and the last one's end (launch gaps)."""
    if not kernels:
        return 0
    span = max(k.end for k in kernels) - min(k.start for k in kernels)
    return span - busy_ns(kernels)


def kernel_rows(kernels: Sequence[Kernel], calls: int = 1) -> list[dict[str, Any]]:
    """One row per kernel name, most GPU time first: launches (per call), total and mean GPU time, share."""
    by_name: dict[str, list[int]] = defaultdict(list)
    for k in kernels:
        by_name[k.name].append(k.ns)
    total = sum(k.ns for k in kernels) or 1
    n = max(calls, 1)
    rows = [{"kernel": name, "launches": len(ns), "per_call": len(ns) / n, "total_ns": sum(ns),
             "per_call_ns": sum(ns) / n, "mean_ns": sum(ns) / len(ns), "share": sum(ns) / total}
            for name, ns in by_name.items()]
    return sorted(rows, key=lambda r: -r["total_ns"])


def nvtx_rows(capture: Capture) -> list[dict[str, Any]]:
    """One row per NVTX range name: instances, total and mean CPU time, the GPU time of the kernels it launched."""
    by_name: dict[str, list[Range]] = defaultdict(list)
    for r in capture.ranges:
        by_name[r.name].append(r)
    rows = []
    for name, ranges in by_name.items():
        gpu = sum(k.ns for r in ranges for k in within(capture.kernels, r))
        rows.append({"range": name, "instances": len(ranges), "total_ns": sum(r.ns for r in ranges),
                     "mean_ns": sum(r.ns for r in ranges) / len(ranges), "gpu_ns": gpu,
                     "kernels": sum(len(within(capture.kernels, r)) for r in ranges)})
    return sorted(rows, key=lambda r: -r["total_ns"])


@dataclass(frozen=True)
class Calls:
    """The calls of one implementation (its NVTX ranges named `call` inside its own range) and their kernels."""

    name: str
    calls: list[Range]
    kernels: list[list[Kernel]]       # per call
    copies: list[list[Copy]]

    def summary(self) -> dict[str, Any]:
        flat = [k for ks in self.kernels for k in ks]
        n = max(len(self.calls), 1)
        return {
            "calls": len(self.calls),
            "kernels_per_call": len(flat) / n,
            "gpu_us_per_call": sum(k.ns for k in flat) / n / 1e3,
            "idle_us_per_call": statistics.median(idle_ns(ks) for ks in self.kernels) / 1e3 if self.kernels else 0.0,
            "call_us": statistics.median(c.ns for c in self.calls) / 1e3 if self.calls else 0.0,
            "first_kernel_us": statistics.median(min(k.start for k in ks) - c.start
                                                 for c, ks in zip(self.calls, self.kernels) if ks) / 1e3
            if any(self.kernels) else 0.0,
            "copies_per_call": sum(len(c) for c in self.copies) / n,
            "copy_bytes_per_call": sum(c.bytes for cs in self.copies for c in cs) / n,
            "kernels": kernel_rows(flat, len(self.calls)),
        }

    def median_call(self) -> int:
        """The index of the call whose wall time (its range: launch to sync) is the median, what the picture shows: its
        host gaps as typical as its kernels (the call of median GPU time was once one whose host stalled, 3x the
        median wall: layernorm's full pass, H200). With an even number of calls, the upper of the middle two: its
        wall time may differ a little from the summary's median."""
        order = sorted(range(len(self.calls)), key=lambda i: self.calls[i].ns)
        return order[len(order) // 2] if order else 0


def calls_of(capture: Capture, impl: str, call: str = "call") -> Calls:
    """The calls of `impl`: ranges named `call` inside a range named `impl`."""
    outer = [r for r in capture.ranges if r.name == impl]
    calls = [c for c in capture.ranges if c.name == call and any(o.start <= c.start and c.end <= o.end for o in outer)]
    return Calls(impl, calls, [within(capture.kernels, c) for c in calls],
                 [copies_within(capture.copies, c) for c in calls])


# --------------------------------------------------------------------------- Markdown


def us(ns: float) -> str:
    return f"{ns / 1e3:,.1f} µs" if ns < 1e7 else f"{ns / 1e6:,.2f} ms"


def short(name: str, width: int = 60) -> str:
    """`name` in at most `width` characters: its start and its end, which tells generated kernels apart
    (torch.compile's `triton_red_fused_..._backward_0` and `_2`)."""
    if len(name) <= width:
        return name
    tail = width // 3 if width > 8 else 0
    return name[: width - 3 - tail] + "..." + (name[-tail:] if tail else "")


def kernel_table(rows: Sequence[dict[str, Any]], *, per_call: bool = False, limit: int = 15) -> list[str]:
    head = "| kernel | launches" + (" per call | GPU time per call" if per_call else " | GPU time") + " | mean | share |"
    lines = [head, "|---|---:|---:|---:|---:|"]
    for r in rows[:limit]:
        launches = f"{r['per_call']:g}" if per_call else str(r["launches"])
        time = us(r["per_call_ns"] if per_call else r["total_ns"])
        lines.append(f"| `{short(r['kernel'])}` | {launches} | {time} | {us(r['mean_ns'])} | {100 * r['share']:.1f}% |")
    if len(rows) > limit:
        lines.append(f"| ({len(rows) - limit} more kernels) | | | | |")
    return lines


def nvtx_table(rows: Sequence[dict[str, Any]], limit: int = 20) -> list[str]:
    lines = ["| NVTX range | instances | CPU time | mean | kernels | their GPU time |", "|---|---:|---:|---:|---:|---:|"]
    for r in rows[:limit]:
        lines.append(f"| `{short(r['range'], 48)}` | {r['instances']} | {us(r['total_ns'])} | {us(r['mean_ns'])} "
                     f"| {r['kernels']} | {us(r['gpu_ns'])} |")
    return lines


# --------------------------------------------------------------------------- the picture


@dataclass(frozen=True)
class Lane:
    """One row of the picture: its label, the ranges above and the kernels below, times from `origin` (ns)."""

    label: str
    ranges: Sequence[Range]
    kernels: Sequence[Kernel]
    origin: int


#: Kernel names a picture colours and names apart (matplotlib's tab20); the rest share OTHER, one legend entry.
NAMED = 20
OTHER = "#404040"


def colours(names: Sequence[str]) -> dict[str, Any]:
    """A colour per kernel name (names in order of GPU time): the first NAMED each their own, the rest OTHER. Lanes
    side by side compare kernels by colour, so no two names may share one. tab20 pairs a dark and a light shade of
    each hue: the 10 dark ones go first, so that the kernels that take the most time differ in hue."""
    import matplotlib.pyplot as plt  # pyplot's get_cmap: also in matplotlib 3.4 (Debian 11's images)

    palette = plt.get_cmap("tab20")
    return {n: palette(2 * i % NAMED + 2 * i // NAMED) if i < NAMED else OTHER for i, n in enumerate(names)}


def legend(names: Sequence[str], colour: dict[str, Any]) -> list[tuple[str, Any]]:
    """The picture's legend, (label, colour) per entry: the first NAMED names, then one entry for the rest."""
    entries = [(short(n, 50), colour[n]) for n in names[:NAMED]]
    if len(names) > NAMED:
        entries.append((f"{len(names) - NAMED} other kernels", OTHER))
    return entries


def picture(path: Path, lanes: Sequence[Lane], title: str) -> Path:
    """The timeline PNG: per lane, its NVTX ranges (nested ones stacked) above its kernels, coloured by name."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [r["kernel"] for r in kernel_rows([k for lane in lanes for k in lane.kernels])]
    colour = colours(names)
    span = max([1e-3] + [(max([k.end for k in lane.kernels] + [r.end for r in lane.ranges]) - lane.origin) / 1e3
                         for lane in lanes if lane.kernels or lane.ranges])
    scale, unit = (1.0, "µs") if span < 2e4 else (1e-3, "ms")
    handles = [matplotlib.patches.Patch(color=c, label=label) for label, c in legend(names, colour)]
    columns = 2 if len(handles) <= 8 else 3
    legend_rows = -(-len(handles) // columns)
    height = 1.0 + 1.3 * len(lanes) + 0.45 + 0.17 * legend_rows      # title, lanes, axis label, legend (inches)
    fig, axes = plt.subplots(len(lanes), 1, figsize=(12, height), squeeze=False, sharex=True)
    for ax, lane in zip(axes[:, 0], lanes):
        depth = _depths(lane.ranges)
        top = max(depth.values(), default=-1) + 1
        for r in lane.ranges:
            y = 1.2 + 0.6 * (top - 1 - depth[r])
            x0, w = (r.start - lane.origin) / 1e3 * scale, r.ns / 1e3 * scale
            ax.broken_barh([(x0, w)], (y, 0.5), facecolors="#d9d9d9", edgecolors="#7f7f7f", linewidth=0.5)
            if w > span * scale / 25:
                ax.text(x0 + w / 2, y + 0.25, short(r.name, 24), ha="center", va="center", fontsize=7)
        for k in lane.kernels:
            ax.broken_barh([((k.start - lane.origin) / 1e3 * scale, max(k.ns / 1e3 * scale, span * scale / 2000))],
                           (0, 1), facecolors=colour[k.name], edgecolors="none")
        ax.set_yticks([0.5] + ([1.2 + 0.3 + 0.6 * (top - 1) / 2] if top else []))
        ax.set_yticklabels(["kernels"] + (["NVTX"] if top else []), fontsize=8)
        ax.set_ylim(-0.1, 1.3 + 0.6 * max(top, 0.5))
        ax.set_title(lane.label, fontsize=9, loc="left")
        ax.grid(axis="x", alpha=0.3)
    axes[-1, 0].set_xlabel(f"time ({unit})")
    if handles:
        fig.legend(handles=handles, loc="lower center", ncol=columns, fontsize=7, frameon=False,
                   bbox_to_anchor=(0.5, 0.0))
    fig.suptitle(title, fontsize=10)
    fig.tight_layout(rect=(0, (0.1 + 0.17 * legend_rows) / height, 1, 1 - 0.3 / height))
    fig.savefig(path, dpi=130)
    plt.close(fig)
    return path


def _depths(ranges: Sequence[Range]) -> dict[Range, int]:
    """Nesting depth of each range among those of its thread (0: outermost)."""
    depth: dict[Range, int] = {}
    open_: list[Range] = []
    for r in sorted(ranges, key=lambda r: (r.start, -r.end)):
        open_ = [o for o in open_ if o.end >= r.end and o.start <= r.start and o.thread == r.thread]
        depth[r] = len(open_)
        open_.append(r)
    return depth
