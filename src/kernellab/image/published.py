"""`make check-matrix`: the matrix's PyTorch releases against what PyPI publishes.

For every Python from 3.6 to 3.15, `pip index versions` lists the releases of torch (and of each triton the matrix
pins) that PyPI has a wheel of for this platform; the Python range the matrix gives each release must be exactly the
Pythons PyPI publishes it for (release notes call some Pythons "experimental" that do have wheels, and the other
way round). Releases newer than the newest the matrix knows are reported, to be added. Without the index (no
network) it says so and stops: the comparison needs PyPI's answer, not a guess.
"""
from __future__ import annotations

import re
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Callable, Sequence

from .. import proc
from ..errors import KernellabError
from .kinds.choose import span
from .targets import Matrix, Torch, load, vkey

PYTHONS = tuple(f"3.{minor}" for minor in range(6, 16))
_LISTED = re.compile(r"^Available versions:\s*(.*)$", re.MULTILINE)
#: What pip says when it could not ask the index at all (it then also says "No matching distribution").
_UNREACHABLE = ("Could not fetch URL", "Retrying", "NewConnectionError", "Failed to establish", "Temporary failure "
                "in name resolution", "ConnectTimeout", "SSLError")

#: (package, python) -> the versions PyPI publishes (a test hands its own).
Lister = Callable[[str, str], list[str]]


class Unreachable(KernellabError):
    """pip could not reach the package index."""


def pypi_versions(package: str, python: str) -> list[str]:
    """The versions of package with a wheel for this platform and python, as `pip index versions` lists them
    (local builds such as 2.13.0+cpu, which a find-links folder may add, left out)."""
    # 3.X.99: a release that requires, say, Python >=3.6.2 is listed for 3.6 (pip reads a bare 3.6 as 3.6.0).
    r = proc.run([sys.executable, "-m", "pip", "index", "versions", package, "--python-version", f"{python}.99",
                  "--only-binary", ":all:", "--disable-pip-version-check"], check=False, timeout=300)
    found = _LISTED.search(r.stdout)
    if found:
        return [v for v in (x.strip() for x in found.group(1).split(",")) if v and "+" not in v]
    said = r.stdout + r.stderr
    if "No matching distribution" in said and not any(m in said for m in _UNREACHABLE):
        return []
    last = (r.stderr or r.stdout).strip().splitlines()[-1:] or [f"exit code {r.returncode}"]
    raise Unreachable(f"cannot reach the package index ({last[0]}); `make check-matrix` compares the matrix with "
                      "what PyPI publishes, so run it where PyPI (or your pip configuration's index) is reachable.")


@dataclass(frozen=True)
class Report:
    problems: tuple[str, ...]     # where the matrix and PyPI disagree: the check fails
    news: tuple[str, ...]         # releases newer than the matrix knows: to be added
    notes: tuple[str, ...]        # facts worth knowing that are not differences


def compare(matrix: Matrix, listed: Lister = pypi_versions) -> Report:
    """The matrix's torch releases (and their triton pins) against PyPI's wheels, per Python."""
    asks = [(package, py) for package in ("torch", "triton") for py in PYTHONS]
    with ThreadPoolExecutor(max_workers=4) as pool:   # one pip per package and Python, a few at a time
        found = dict(zip(asks, pool.map(lambda ask: set(listed(*ask)), asks)))
    torch = {py: found["torch", py] for py in PYTHONS}
    if not any(torch.values()):
        raise Unreachable("the package index lists no torch for any Python: it is not PyPI, or pip cannot reach it; "
                          "`make check-matrix` compares the matrix with PyPI, so run it where PyPI is reachable.")
    triton = {py: found["triton", py] for py in PYTHONS}
    problems: list[str] = []
    news: list[str] = []
    notes: list[str] = []
    for t in sorted(matrix.torch.values(), key=lambda t: vkey(t.version)):
        have = [py for py in PYTHONS if t.version in torch[py]]
        want = [py for py in PYTHONS if t.supports_python(py)]
        if not have:
            if t.pypi_default:
                problems.append(f"torch {t.version}: the matrix names PyPI's build ({t.pypi_default}), but PyPI has "
                                f"no wheel of it for any Python")
            continue
        if have != want:
            problems.append(f"torch {t.version}: PyPI publishes wheels for Python {span(have)}; the matrix says "
                            f"{span(want)} (docker/matrix.toml: python = [\"{have[0]}\", \"{have[-1]}\"])")
        _triton(t, have, triton, problems, notes)
    newest = max(matrix.torch, key=vkey)
    newer = sorted({v for vs in torch.values() for v in vs if vkey(v) > vkey(newest)}, key=vkey)
    if newer:
        news.append(f"PyPI has torch {', '.join(newer)}, newer than the matrix's newest ({newest}): add "
                    f"[torch.\"X\"] tables and their wheels' architecture lists (docker/wheels.toml)")
    return Report(tuple(problems), tuple(news), tuple(notes))


def _triton(t: Torch, pythons: Sequence[str], triton: dict[str, set[str]], problems: list[str],
            notes: list[str]) -> None:
    """The triton a release pins must have wheels on PyPI; where it has them for only some of the release's Pythons
    (torch 2.5 requires triton only below Python 3.13), the others get none, which is said."""
    if not t.triton:
        return
    lacking = [py for py in pythons if t.triton not in triton[py]]
    if len(lacking) == len(pythons):
        problems.append(f"torch {t.version} pins triton {t.triton}, which PyPI has no wheel of for any of its Pythons")
    elif lacking:
        notes.append(f"torch {t.version}'s triton {t.triton} has no wheel for Python {', '.join(lacking)}: images "
                     f"with those get no triton")


def main(argv: Sequence[str] | None = None) -> int:
    del argv
    try:
        report = compare(load())
    except Unreachable as e:
        print(f"kernellab: {e}", file=sys.stderr)
        return 2
    for line in report.notes:
        print(f"note: {line}")
    for line in report.news:
        print(f"new: {line}")
    for line in report.problems:
        print(f"MISMATCH: {line}")
    if report.problems:
        print(f"{len(report.problems)} difference(s) between docker/matrix.toml and PyPI.", file=sys.stderr)
        return 1
    print(f"docker/matrix.toml agrees with PyPI: {len(load().torch)} torch releases, Pythons {span(PYTHONS)}.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
