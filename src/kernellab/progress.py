"""Progress for waits longer than a few seconds: a tqdm bar on a terminal, plain lines in a log.

One class for every long wait (image build steps, export/import, bench cases, watch): `Bar`.
On a terminal it is tqdm's bar, with other output written above it; when the output is a file
or a pipe (CI, `| tee`, a container's log) it prints a plain line per step, or for byte counts
at most one line every `every` seconds and one at the end, so logs stay readable.
"""
from __future__ import annotations

import sys
import time
from typing import IO, Any


class Bar:
    def __init__(self, total: int | None, desc: str, *, unit: str = "", scale: bool = False,
                 out: IO[str] | None = None, every: float = 15.0, lines: bool = False):
        """total: steps or bytes (None: unknown); scale: show k/M/G (bytes); lines: a plain line per update."""
        self.out = out or sys.stderr
        self.total, self.desc, self.unit, self.scale = total, desc, unit, scale
        self.every, self.lines = every, lines
        self.done, self.label = 0, ""
        self.start = self.last = time.monotonic()
        self._bar: Any = None
        if getattr(self.out, "isatty", lambda: False)():
            try:
                from tqdm import tqdm
            except ImportError:  # plain lines still work; tqdm is a host dependency, not an image one
                tqdm = None
            if tqdm is not None:
                self._bar = tqdm(total=total, desc=desc, unit=unit or "it", unit_scale=scale, file=self.out,
                                 leave=False, dynamic_ncols=True)

    @property
    def tty(self) -> bool:
        return self._bar is not None

    def update_to(self, done: int, label: str = "") -> None:
        """Progress is now `done` (of total); label says what is being worked on."""
        step, self.done = done - self.done, done
        if label:
            self.label = label
        if self._bar is not None:
            if label:
                self._bar.set_postfix_str(label[:60], refresh=False)
            self._bar.update(step)
            return
        now = time.monotonic()
        finished = self.total is not None and done >= self.total
        if self.lines or finished or now - self.last >= self.every:
            self.last = now
            self.out.write(self._plain() + "\n")
            self.out.flush()

    def step(self, label: str = "") -> None:
        self.update_to(self.done + 1, label)

    def write(self, text: str) -> None:
        """Output that belongs above the bar (a result line, a build log line)."""
        if self._bar is not None:
            self._bar.write(text.rstrip("\n"), file=self.out)
        else:
            self.out.write(text if text.endswith("\n") else text + "\n")
            self.out.flush()

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()

    def _plain(self) -> str:
        def amount(n: float) -> str:
            return f"{n / 1e6:,.0f} MB" if self.scale else f"{n:,.0f}"
        of = f"/{amount(self.total)}" if self.total else ""
        if self.scale:
            rate = self.done / 1e6 / max(time.monotonic() - self.start, 1e-6)
            return f"{self.desc}: {amount(self.done)}{of}, {rate:,.0f} MB/s"
        return f"{self.desc}: {amount(self.done)}{of}{f' {self.unit}' if self.unit else ''}" + \
            (f" {self.label}" if self.label else "")

    def __enter__(self) -> Bar:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
