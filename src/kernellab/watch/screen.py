"""`invoke watch`: one round's result and the screen that shows it."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

#: Most compiler lines shown on a terminal (the rest is in the build log).
MAX_ERROR_LINES = 40


# --------------------------------------------------------------------------- one round's result


@dataclass(frozen=True)
class Trigger:
    """What started a round: the changed files (relative to the kernels folder) and when they were saved."""

    changed: list[str]
    saved: float
    first: bool = False


@dataclass(frozen=True)
class CaseResult:
    """One candidate at one test shape, dtype and seed (`failure` is None when it matches)."""

    label: str
    shape: dict
    dtype: str
    seed: int
    failure: str | None = None


@dataclass(frozen=True)
class ArgResult:
    """One argument check of one candidate: a bad dtype, device, layout, or shapes."""

    label: str
    check: str
    failure: str | None = None


@dataclass
class RoundResult:
    """Everything one round found, for `render`."""

    op: str
    trigger: Trigger
    status: str = "pass"                 # pass | fail | error
    build: str = ""                      # "rebuilt in 1.2 s", "up to date", ...
    summary: str = ""                    # for an error: what failed ("does not compile")
    error: str = ""                      # the error's text: the compiler's lines, a traceback
    candidates: list[str] = field(default_factory=list)
    shapes: list[dict] = field(default_factory=list)
    dtypes: list[str] = field(default_factory=list)
    cases: list[CaseResult] = field(default_factory=list)
    args: list[ArgResult] = field(default_factory=list)
    bench: list[str] = field(default_factory=list)
    seconds: float | None = None         # from the save (or the start) to the result
    phases: dict[str, float] = field(default_factory=dict)  # where those seconds went: start, build, checks, bench


def shape_label(shape: dict) -> str:
    return " ".join(f"{k}={v}" for k, v in shape.items())


def status_line(r: RoundResult) -> str:
    """The round's last line; its first word (PASS, FAIL, ERROR) is for scripts."""
    if r.seconds is None:
        took = ""
    elif r.trigger.first:
        took = f"; {r.seconds:.1f} s from start to result"
    else:
        took = f"; {r.seconds:.1f} s from save to result"
    if r.status == "error":
        return f"ERROR {r.op}: {r.summary}{took}; waiting for the next save"
    failed_cases = sum(c.failure is not None for c in r.cases)
    failed_args = sum(a.failure is not None for a in r.args)
    if r.status == "pass":
        return f"PASS {r.op}: {len(r.cases)} cases and {len(r.args)} argument checks pass{took}"
    parts = []
    if failed_cases:
        parts.append(f"{failed_cases} of {len(r.cases)} cases")
    if failed_args:
        parts.append(f"{failed_args} of {len(r.args)} argument checks")
    return f"FAIL {r.op}: {' and '.join(parts) or 'checks'} fail{took}"


def render(r: RoundResult, *, tty: bool = False, height: int | None = None) -> str:
    """The round's result in one screen: build, pass/fail per shape and dtype, the first failure, the
    argument checks, the bench line, and the status line. `tty`: colour; otherwise plain text."""

    def paint(text: str, code: str) -> str:
        return f"\033[{code}m{text}\033[0m" if tty else text

    lines = [f"{r.op}: {r.build}" if r.build else r.op]
    if r.status == "error":
        error = r.error.rstrip().splitlines()
        limit = max(5, (height or MAX_ERROR_LINES + 4) - 4) if tty else MAX_ERROR_LINES
        if len(error) > limit:
            error = error[:limit] + [f"... ({len(error) - limit} more lines)"]
        lines += [f"  {line}" for line in error]
    else:
        lines += _table(r, paint)
        first = next((c for c in r.cases if c.failure), None)
        if first is not None:
            lines.append(f"  first failure: {first.label} {shape_label(first.shape)} {first.dtype} seed {first.seed}:")
            lines.append(f"    {first.failure}")
        failed_args = [a for a in r.args if a.failure]
        if not r.args:
            pass
        elif not failed_args:
            checks = ", ".join(dict.fromkeys(a.check for a in r.args))
            lines.append(f"  argument checks: {paint('pass', '32')} ({checks})")
        else:
            lines.append(f"  argument checks: {paint('FAIL', '31')} {len(failed_args)} of {len(r.args)}")
            lines += [f"    {a.label} {a.check}: {a.failure}" for a in failed_args[:3]]
        lines += [f"  {line}" for line in r.bench]
    if r.phases:
        lines.append("  time: " + ", ".join(f"{name} {seconds:.2f} s" for name, seconds in r.phases.items()))
    status = status_line(r)
    colour = {"pass": "1;32", "fail": "1;31", "error": "1;31"}.get(r.status, "1")
    return "\n".join([*lines, paint(status, colour)])


def _table(r: RoundResult, paint: Any) -> list[str]:
    """Rows: test shapes; columns: dtypes; a cell is pass, FAIL, or FAIL with the failing candidates."""
    if not r.cases:
        return []
    failing: dict[tuple[str, str], list[str]] = {}
    for c in r.cases:
        key = (shape_label(c.shape), c.dtype)
        failing.setdefault(key, [])
        if c.failure is not None and c.label not in failing[key]:
            failing[key].append(c.label)
    shapes = list(dict.fromkeys(shape_label(s) for s in r.shapes)) or list(dict.fromkeys(k[0] for k in failing))
    dtypes = r.dtypes or list(dict.fromkeys(k[1] for k in failing))

    def cell(shape: str, dtype: str) -> tuple[str, str]:
        labels = failing.get((shape, dtype))
        if labels is None:
            return "-", ""
        if not labels:
            return "pass", "32"
        if len(r.candidates) > 1 and len(labels) < len(r.candidates):
            return f"FAIL {','.join(labels)}", "31"
        return "FAIL", "31"

    cells = {(s, d): cell(s, d) for s in shapes for d in dtypes}
    first = max(len("shape"), *(len(s) for s in shapes))
    widths = [max(len(d), *(len(cells[(s, d)][0]) for s in shapes)) for d in dtypes]
    rows = ["  " + "shape".ljust(first) + "  " + "  ".join(d.ljust(w) for d, w in zip(dtypes, widths))]
    for s in shapes:
        parts = []
        for d, w in zip(dtypes, widths):
            text, colour = cells[(s, d)]
            parts.append(paint(text, colour) + " " * (w - len(text)) if colour else text.ljust(w))
        rows.append(("  " + s.ljust(first) + "  " + "  ".join(parts)).rstrip())
    return rows


