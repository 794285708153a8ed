"""The kernel code a bench run timed: results.json's `sources`, per op what it compiled (kernellab.ops.library.
kernel_sources: each file by its path and content hash, one sha256 over them), read as the run builds each op. This
module says it in a summary's header, keeps it across a merged sweep, and compares it between two runs (--compare).
"""
from __future__ import annotations

from typing import Any, Sequence


def header_line(doc: dict[str, Any]) -> str | None:
    """The summary's line naming each op's digest; None for a run that recorded none."""
    sources = _entries(doc)
    if not sources:
        return None
    return ("- Kernel sources (sha256 of the files each op compiles, listed in results.json): "
            + ", ".join(f"{op} {s['sha256'][:12]} ({_files(len(s['files']))})" for op, s in sources.items()))


def merged(parts: Sequence[tuple[str, dict[str, Any]]]) -> dict[str, Any]:
    """Each op's sources as the part named after it recorded them, whose rows the merge keeps (a part made with
    `-k add` may have compiled another op too, from another checkout); none for an op whose own part recorded none.
    An op without a part of its own takes them from the first part that has them."""
    own = {op for op, _ in parts}
    out: dict[str, Any] = {}
    for op, doc in parts:
        for name, source in _entries(doc).items():
            if name == op or (name not in own and name not in out):
                out[name] = source
    return out


def changes(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """One line per op of the new run: the same kernel sources as the old run's (by digest), or which files changed;
    runs made before kernellab recorded them have none to compare, and a file that could not be read in either run
    leaves the answer open."""
    olds, news = _entries(old), _entries(new)
    lines = []
    for op, now in sorted(news.items()):
        was = olds.get(op)
        unreadable = sorted({f for s in (was, now) if s for f, sha in s["files"].items() if sha == "unreadable"})
        if was is None:
            why = "the old run did not build it" if olds else "the old run recorded none (made before kernellab did)"
            lines.append(f"{op}: {now['sha256'][:12]}; {why}")
        elif unreadable:
            lines.append(f"{op}: unknown, {_files(len(unreadable))} could not be read: {', '.join(unreadable)}")
        elif was["sha256"] == now["sha256"]:
            lines.append(f"{op}: the same ({now['sha256'][:12]})")
        else:
            files = sorted(set(was["files"]) | set(now["files"]))
            changed = [f for f in files if was["files"].get(f) != now["files"].get(f)]
            lines.append(f"{op}: {was['sha256'][:12]} -> {now['sha256'][:12]}, {len(changed)} of {len(files)} files "
                         f"changed: {', '.join(changed)}")
    return lines


def _entries(doc: dict[str, Any]) -> dict[str, Any]:
    """A run's `sources`, each entry as kernel_sources writes it; anything else (an edited or damaged file) left out,
    as if the run had recorded nothing for that op."""
    raw = doc.get("sources")
    if not isinstance(raw, dict):
        return {}
    return {op: s for op, s in raw.items()
            if isinstance(s, dict) and isinstance(s.get("sha256"), str) and isinstance(s.get("files"), dict)}


def _files(n: int) -> str:
    return f"{n} file{'s' if n != 1 else ''}"
