"""The paper's claims judged against this run: one verdict each, with why.

- `ratio`: the claim's value over its baseline's, as printed in the paper (e.g. 21 ms / 9.22 ms = 2.28x), against
  the same ratio measured here, on this GPU, in this run. This is the claim that travels between GPUs.
- `absolute`: the number itself, judged only on the paper's own GPU model; elsewhere "not run".

Verdicts: reproduced (at least as good as claimed), within tolerance (short of it by at most the claim's
tolerance), not reproduced (short by more, or a sanity check failed: a fast wrong answer proves nothing),
not run (the case or its baseline did not run, or the claim cannot be judged here; why says which), not judged
(they ran, but a number the verdict needs is not a positive finite number: a metric of 0 from a timer too coarse
for the case, a negative, infinite or NaN value; why says which). Judging never raises: every claim gets a verdict.
"""
from __future__ import annotations

import json
import math
import re
from dataclasses import asdict, dataclass
from typing import Any, Mapping, Sequence

from .. import shown
from ..errors import RecipeError
from .experiments import Case, short_problem
from .model import Claim, Params, Recipe

REPRODUCED, WITHIN, NOT_REPRODUCED, NOT_RUN, NOT_JUDGED = (
    "reproduced", "within tolerance", "not reproduced", "not run", "not judged")
VERDICTS = (REPRODUCED, WITHIN, NOT_REPRODUCED, NOT_RUN, NOT_JUDGED)


@dataclass(frozen=True)
class Verdict:
    claim: str
    verdict: str
    why: str
    judge: str
    claimed: float             # the ratio (ratio claims) or the value (absolute), as the paper has it
    measured: float | None
    unit: str                  # "x" for ratios
    paper_gpu: str
    where: str
    tolerance: float

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


def _sig(x: float) -> float:
    """x to 6 significant digits: a record shows 1e-07 as that, never as 0."""
    return float(f"{x:.6g}")


def same_gpu_model(paper_gpu: str, gpu_name: str) -> bool:
    """"A100" against "NVIDIA A100-SXM4-80GB": the paper's model is one of the name's words."""
    words = set(re.split(r"[^a-z0-9]+", gpu_name.lower()))
    return paper_gpu.lower().replace(" ", "") in words


def _find(cases: Sequence[Case], experiment: str, case: Params) -> Case | None:
    return next((c for c in cases if c.experiment == experiment and all(c.params.get(k) == v for k, v in case.items())),
                None)


def _score(measured: float, claimed: float, better: str, tolerance: float) -> str:
    """reproduced / within tolerance / not reproduced, in the direction in which the number is better."""
    ratio = measured / claimed if better == "higher" else claimed / measured
    if ratio >= 1:
        return REPRODUCED
    return WITHIN if ratio >= 1 - tolerance else NOT_REPRODUCED


def _unrun(case: Case | None, name: str, absent: str = "") -> str | None:
    if case is None:
        return f"{name} did not run ({absent or 'not selected, or --quick'})"
    if case.problem:
        return f"{name} failed: {short_problem(case.problem)}"
    return None


def _unusable(case: Case, metric: str) -> str | None:
    """Why a case's metric cannot enter a verdict (0, negative, inf, NaN, missing), or None."""
    value = case.metrics.get(metric)
    if isinstance(value, (int, float)) and math.isfinite(value) and value > 0:
        return None
    hint = " (a timer too coarse for the case?)" if value == 0 else ""
    return f"{case.experiment}'s {metric} is {value}{hint}: a verdict needs a positive finite number"


def _insane(case: Case) -> str | None:
    bad = [s for s in case.sanity if not s.ok]
    if not bad:
        return None
    return "sanity failed in " + "; ".join(f"{case.experiment}: {s.name} = {s.shown} (must be {s.bound})"
                                           for s in bad)


def judge(recipe: Recipe, cases: Sequence[Case], *, gpu_name: str | None,
          stand_ins: Mapping[str, str] | None = None, absent: Mapping[str, str] | None = None) -> list[Verdict]:
    """Every claim's verdict; stand_ins: experiment -> why its data is a stand-in (its claims are not run);
    absent: experiment -> why a case of it is missing from this run (left out, not selected, stopped)."""
    made = stand_ins or {}
    return [judge_one(recipe, c, cases, gpu_name=gpu_name,
                      stand_in=made.get(c.experiment) or (made.get(c.baseline) if c.baseline else None),
                      absent=absent or {})
            for c in recipe.claims]


def judge_one(recipe: Recipe, claim: Claim, cases: Sequence[Case], *, gpu_name: str | None,
              stand_in: str | None = None, absent: Mapping[str, str] | None = None) -> Verdict:
    exp = recipe.experiment(claim.experiment)
    metric = exp.metric(claim.metric)
    assert metric is not None  # checked when the recipe was read
    better = metric.better
    if claim.judge == "ratio":
        assert claim.baseline_value is not None
        claimed = claim.value / claim.baseline_value if better == "higher" else claim.baseline_value / claim.value
        unit = "x"
    else:
        claimed, unit = claim.value, claim.unit or metric.unit

    def verdict(v: str, why: str, measured: float | None = None) -> Verdict:
        return Verdict(claim.name, v, why, claim.judge, _sig(claimed), None if measured is None else _sig(measured),
                       unit, claim.gpu, claim.where, claim.tolerance)

    if stand_in:
        return verdict(NOT_RUN, f"stand-in data ({stand_in}): the paper's numbers are for its own data")
    own = _find(cases, claim.experiment, dict(claim.case))
    why_absent = absent or {}
    problem = _unrun(own, claim.experiment, why_absent.get(claim.experiment, ""))
    if problem or own is None:
        return verdict(NOT_RUN, problem or "")
    bad = _unusable(own, claim.metric)
    if bad:
        return verdict(NOT_JUDGED, bad)
    value = own.metrics[claim.metric]
    if claim.judge == "absolute":
        if not gpu_name or not same_gpu_model(claim.gpu, gpu_name):
            return verdict(NOT_RUN, f"an absolute claim is judged only on the paper's {claim.gpu}; this run's GPU is "
                                    f"{gpu_name or 'none'} (its ratio claims travel)", value)
        measured, insane = value, _insane(own)
    else:
        assert claim.baseline is not None
        base = _find(cases, claim.baseline, dict(claim.case))
        problem = _unrun(base, f"baseline {claim.baseline}", why_absent.get(claim.baseline, ""))
        if problem or base is None:
            return verdict(NOT_RUN, problem or "")
        bad = _unusable(base, claim.metric)
        if bad:
            return verdict(NOT_JUDGED, bad)
        b = base.metrics[claim.metric]
        measured = value / b if better == "higher" else b / value
        if not math.isfinite(measured) or measured <= 0:   # each finite, their ratio past a float's range
            return verdict(NOT_JUDGED, f"{claim.experiment}'s {claim.metric} ({value:g}) over {claim.baseline}'s "
                                       f"({b:g}) is {measured}: a verdict needs a positive finite ratio")
        insane = _insane(own) or _insane(base)
    if insane:
        return verdict(NOT_REPRODUCED, insane, measured)
    v = _score(measured, claimed, better if claim.judge == "absolute" else "higher", claim.tolerance)
    how = f"{measured:.3g}{unit if unit == 'x' else ' ' + unit} measured against {claimed:.3g}" \
          f"{unit if unit == 'x' else ' ' + unit} claimed"
    return verdict(v, f"{how} (tolerance {claim.tolerance:.0%})", measured)


# --------------------------------------------------------------------------- pairing, said before anything runs

def _toml(case: Mapping[str, Any]) -> str:
    return "{" + ", ".join(f"{k} = {json.dumps(v)}" for k, v in case.items()) + "}"


def _planned(recipe: Recipe, quick: bool) -> list[Case]:
    """The cases a run of every experiment would have, without their numbers: what judging searches."""
    return [Case(e.name, p) for e in recipe.experiments for p in e.cases(quick)]


def _side(recipe: Recipe, experiment: str, found: Case, case: Mapping[str, Any]) -> str:
    """found (the case _find pairs) as `name k=v`, and why it is that one where the claim's case alone does not say."""
    exp = recipe.experiment(experiment)
    if not exp.grid:
        return f"{experiment} (its only case: it has no grid)"
    named = " ".join([experiment, *(f"{k}={v}" for k, v in found.params.items() if k in exp.grid or k in case)])
    if not case and len(exp.cases()) > 1:
        return f"{named} (the first case of its grid: the claim names no case)"
    if sum(all(p.get(k) == v for k, v in case.items()) for p in exp.cases()) > 1:
        return f"{named} (the first case of its grid with {' '.join(f'{k}={v}' for k, v in case.items())})"
    return named


def _never(recipe: Recipe, index: int, experiment: str, role: str) -> RecipeError:
    claim, case = recipe.claims[index], dict(recipe.claims[index].case)
    exp = recipe.experiment(experiment)
    missing = [k for k in case if not any(p.get(k) == case[k] for p in exp.cases())] or list(case)
    grid = (f"its grid: {_toml({k: list(v) for k, v in exp.grid.items()})}" if exp.grid else
            f"it has no grid: its one case has no {', '.join(missing)}")
    return RecipeError(f"{shown(recipe.file)}: claims[{index}].case {_toml(case)} is never a case of {role} "
                       f"{experiment} ({grid}), so claim \"{claim.name}\" could never be judged; give {experiment} a "
                       f"grid with {', '.join(f'{k} = {json.dumps(case[k])}' for k in missing)}, or drop "
                       f"{', '.join(missing)} from the claim's case.")


def pairing(recipe: Recipe, index: int) -> str:
    """How judging will pair claim `index`'s cases, as judge_one does it (_find: the first case, in grid order, of the
    claim's experiment whose values include every value of the claim's case; the baseline's likewise, with the
    same values), on the full grids and on --quick's. A pairing that no grid produces is refused (RecipeError)."""
    claim = recipe.claims[index]
    case = dict(claim.case)
    full, quick = _planned(recipe, False), _planned(recipe, True)
    sides = [(claim.experiment, "experiment")] + ([(claim.baseline, "baseline experiment")] if claim.baseline else [])
    found = []
    for experiment, role in sides:
        hit = _find(full, experiment, case)
        if hit is None:
            raise _never(recipe, index, experiment, role)
        found.append((experiment, hit, _find(quick, experiment, case)))
    notes = [f"absolute: judged only on the paper's {claim.gpu}"] if claim.judge == "absolute" else []
    if any(q is None for _, _, q in found):
        notes.append("--quick leaves it out")
    elif any(q is not None and q.params != c.params for _, c, q in found):
        notes.append("with --quick: " + " against ".join(_side(recipe, e, q, case) for e, _, q in found if q))
    text = " against ".join(_side(recipe, e, c, case) for e, c, _ in found)
    return f'"{claim.name}": {text}' + (f" ({'; '.join(notes)})" if notes else "")
