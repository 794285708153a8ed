"""Nsight Systems (`nsys`) facts: which CUDA each release line traces (matrix.toml `[nsys]`), and where it sits.

An nsys version comes in three spellings: NVIDIA's package ("2023.4.4", "2023.4.4.54-234433681190v0"), its own
`nsys --version` ("2025.3.1.90") and Debian's ("2023.4.4.54~12.4.1-2"); each starts with "YEAR.N". A release
line "YEAR.N" traces programs built with CUDA up to the version its `[nsys]` entry names. Standard library only
(kernellab.image.targets loads the table through here; the run side asks `nsys_traces`).
"""
from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Protocol

from ..errors import ConfigError

#: Where an image's Nsight Systems is (both kinds that carry one): PREFIX/<release>/bin/nsys.
PREFIX = "/opt/nvidia/nsight-systems"

_LINE = re.compile(r"(\d{4})\.(\d+)")
_RELEASE = re.compile(r"\d{4}\.\d+(?:\.\d+)?")
_CUDA = re.compile(r"\d+\.\d+")


class HasLines(Protocol):
    """A Matrix, as far as nsys_traces needs it."""

    @property
    def nsys_lines(self) -> dict[str, str]: ...


def line(version: str) -> tuple[int, int] | None:
    """The release line (year, minor) a version of nsys belongs to, whichever spelling; None if it names none."""
    m = _LINE.match(version.strip())
    return (int(m.group(1)), int(m.group(2))) if m else None


def release(version: str) -> str:
    """The version as NVIDIA names its folder and package ("2023.4.4" for Debian's "2023.4.4.54~12.4.1-2")."""
    m = _RELEASE.match(version.strip())
    return m.group(0) if m else version


def home(version: str) -> str:
    """Where an image keeps this nsys: /opt/nvidia/nsight-systems/<release> (its `bin/nsys`, `host-linux-x64/`)."""
    return f"{PREFIX}/{release(version)}"


def traces(lines: Mapping[str, str], version: str) -> str | None:
    """The newest CUDA an nsys version traces: the entry of the highest release line at or below its own; None when
    the version is older than every line (or names no line)."""
    mine = line(version)
    if mine is None:
        return None
    known = [(line(k), cuda) for k, cuda in lines.items()]
    below = [(k, cuda) for k, cuda in known if k is not None and k <= mine]
    return max(below)[1] if below else None


def nsys_traces(matrix: HasLines, nsys_version: str) -> str | None:
    """The newest CUDA that this nsys version traces, by the matrix's `[nsys]` table ("12.4" for "2023.4.4.54...")."""
    return traces(matrix.nsys_lines, nsys_version)


def read_lines(table: Any) -> dict[str, str]:
    """matrix.toml's `[nsys]` table, checked: "YEAR.N" = "CUDA X.Y"; ConfigError (one sentence) otherwise."""
    if not isinstance(table, dict):
        raise ConfigError(f'[nsys] in matrix.toml must be a table of "YEAR.N" = "X.Y" entries, not {table!r}.')
    out = {}
    for key, cuda in table.items():
        if not re.fullmatch(r"\d{4}\.\d+", key) or not isinstance(cuda, str) or not _CUDA.fullmatch(cuda):
            raise ConfigError(f'[nsys] "{key}" = {cuda!r} in matrix.toml: want a release line "YEAR.N" = the newest '
                              f'CUDA it traces "X.Y", such as "2023.4" = "12.4".')
        out[key] = cuda
    return out


def check(lines: Mapping[str, str], pinned: Mapping[str, str], vkey: Any) -> None:
    """Every nsys pinned for a CUDA (`where` -> version) traces that CUDA: never older than the toolkit it is for."""
    for where, version in pinned.items():
        cuda = where.split('"')[1]
        can = traces(lines, version)
        if can is None or vkey(can) < vkey(cuda):
            reach = f"traces CUDA {can} at most" if can else "is older than every release line"
            raise ConfigError(f"{where} pins Nsight Systems {version}, which {reach} by [nsys] in matrix.toml, not "
                              f"CUDA {cuda}; pin the release that toolkit shipped, or add its line to [nsys].")
