"""Names and versions as refusals show them: a list, a span, and the closest known name ("did you mean")."""
from __future__ import annotations

import difflib
import re
from typing import Iterable, Sequence

from ..targets import vkey


def known(items: Iterable[str]) -> str:
    return ", ".join(sorted(items, key=vkey))


def span(versions: Sequence[str]) -> str:
    vs = sorted(versions, key=vkey)
    if not vs:
        return "none"
    return vs[0] if len(vs) == 1 else f"{vs[0]}–{vs[-1]}"


def closest(word: str, candidates: Iterable[str]) -> str | None:
    """The known name most like word (difflib), or None; among equally similar versions, the nearest."""
    w = str(word).strip().lower()
    scored = []
    for c in dict.fromkeys(candidates):
        ratio = difflib.SequenceMatcher(None, w, c.lower()).ratio()
        if ratio >= 0.6 and c.lower() != w:
            scored.append((ratio, -_distance(w, c), c))
    return max(scored)[2] if scored else None


def did_you_mean(word: str, candidates: Iterable[str]) -> str:
    """" (did you mean X?)" for the closest known name, or "" when nothing is close."""
    best = closest(word, candidates)
    return f" (did you mean {best}?)" if best else ""


def _distance(a: str, b: str) -> float:
    """How far apart the version numbers in two names are ("ubuntu20.04" is nearer 18.04 than 24.04)."""
    pa, pb = [int(n) for n in re.findall(r"\d+", a)], [int(n) for n in re.findall(r"\d+", b)]
    if not pa or not pb:
        return 0.0
    return abs(sum(p / 1000.0 ** i for i, p in enumerate(pa)) - sum(p / 1000.0 ** i for i, p in enumerate(pb)))
