"""A recipe's experiments in its built image: every case and repeat one job (kernellab.jobs.recipe_case) that a
place runs (a container of the image here, the cluster task itself on a node), its output kept, metrics and sanity
values extracted by regex. A case that fails is recorded and the run goes on."""
from __future__ import annotations

import re
import statistics
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import IO, Any, Callable, Mapping

from .. import jobs
from ..errors import RecipeError
from ..ops.spec import compile_select
from ..places import Place
from ..proc import TIMED_OUT
from .model import Experiment, Params, Recipe, Sanity, substitute
from .values import Values


@dataclass(frozen=True)
class Repeat:
    """One repeat of a case: how its command ended, how long it took, where its output is, what it printed."""

    repeat: int
    exit_code: int
    seconds: float
    output: str                              # the raw output file, relative to the run's folder
    metrics: dict[str, float | None]         # None: the metric's pattern matched nothing

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


@dataclass(frozen=True)
class Checked:
    """One sanity check of a case: the value its output printed (None: none) against the bound."""

    name: str
    value: float | None
    bound: str
    ok: bool

    @property
    def shown(self) -> str:
        """The value as records show it: `0`, not `0.0`; `not printed` when the output had none."""
        return "not printed" if self.value is None else f"{self.value:g}"

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


@dataclass
class Case:
    """One case of an experiment: its parameters, every repeat's outcome, the metrics' medians."""

    experiment: str
    params: Params
    command: str = ""
    runs: list[Repeat] = field(default_factory=list)
    metrics: dict[str, float] = field(default_factory=dict)      # median over the repeats that gave it
    sanity: list[Checked] = field(default_factory=list)          # of the worst repeat
    problem: str | None = None                                   # why the case has no (trustworthy) numbers

    @property
    def key(self) -> str:
        return slug(self.experiment, self.params)

    @property
    def sane(self) -> bool:
        return all(s.ok for s in self.sanity)

    def to_dict(self) -> dict[str, object]:
        return {"experiment": self.experiment, "params": self.params, "command": self.command,
                "runs": [r.to_dict() for r in self.runs], "metrics": self.metrics,
                "sanity": [s.to_dict() for s in self.sanity], "problem": self.problem}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Case:
        return cls(d["experiment"], d["params"], d.get("command", ""), [Repeat(**r) for r in d.get("runs", [])],
                   d.get("metrics", {}), [Checked(**s) for s in d.get("sanity", [])], d.get("problem"))


def slug(experiment: str, params: Params) -> str:
    return "-".join([experiment, *(f"{k}{v}" for k, v in params.items())]).replace("/", "_")


def select(recipe: Recipe, k: str | None) -> list[Experiment]:
    if not k:
        return list(recipe.experiments)
    match = compile_select(k)
    chosen = [e for e in recipe.experiments if match(e.name)]
    if not chosen:
        raise RecipeError(f"-k {k!r} matches no experiment of recipe {recipe.name} (experiments: "
                          f"{', '.join(recipe.experiment_names)}).")
    return chosen


def runnable(chosen: list[Experiment], *, cuda: str | None, target: str | None, recipe: Recipe,
             out: IO[str]) -> list[Experiment]:
    """The experiments this target can run: one that needs CUDA is left out of a CPU target's run, said so."""
    if cuda:
        return chosen
    left = [e for e in chosen if e.needs_cuda]
    if left and len(left) == len(chosen):
        raise RecipeError(f"{', '.join(e.name for e in left)} need{'s' * (len(left) == 1)} CUDA, and target "
                          f"{target} has none; run them with --target of a CUDA target ({recipe.requirements.note or 'see recipe check'}).")
    if left:
        out.write(f"not run here: {', '.join(e.name for e in left)} (they need CUDA; target {target} has none)\n")
    return [e for e in chosen if not e.needs_cuda]


def extract(pattern: str, output: str, reduce: str = "last") -> float | None:
    """The number the pattern's group matched in the output (the last, or the min or max of all), or None."""
    found = []
    for raw in re.findall(pattern, output, re.MULTILINE):
        try:
            found.append(float(raw))
        except ValueError:
            continue
    if not found:
        return None
    return min(found) if reduce == "min" else max(found) if reduce == "max" else found[-1]


def check_sanity(checks: tuple[Sanity, ...], output: str) -> list[Checked]:
    result = []
    for s in checks:
        v = extract(s.regex, output)
        ok = v is not None and (s.max is None or v <= s.max) and (s.min is None or v >= s.min)
        result.append(Checked(s.name, v, s.bound(), ok))
    return result


def short_problem(problem: str) -> str:
    """A case's problem in one line for a table: what happened, and the last line its output had."""
    head, _, tail = problem.partition("; last lines:")
    last = [x.strip() for x in tail.splitlines() if x.strip()]
    return head.strip() + (f" (last line: {last[-1]})" if last else "")


def _last_lines(text: str, n: int = 8) -> str:
    return "\n".join(text.rstrip().splitlines()[-n:]) or "(no output)"


def run_case(exp: Experiment, params: Params, vals: Values, *, place: Place, raw: Path,
             repeats: int, mounts: tuple[str, ...] = ()) -> Case:
    """Every repeat of one case as a job of the place (each in a container of the recipe's image, or as a process
    of the cluster task that is one), its output kept in raw/; a failed repeat ends the case."""
    case = Case(exp.name, {k: v for k, v in params.items()})
    case.command = substitute(exp.run, {**vals, **params})
    outputs = []
    for r in range(1, repeats + 1):
        file = raw / exp.name / f"{case.key}-r{r}.txt"
        file.parent.mkdir(parents=True, exist_ok=True)
        start = time.monotonic()
        code = place.run(jobs.recipe_case(case.command, exp.cwd, output=file, scratch=file.parent,
                                          timeout=exp.timeout_s, mounts=mounts))
        output = file.read_text(errors="replace") if file.is_file() else ""
        metrics = {m.name: extract(m.regex, output, m.reduce) for m in exp.metrics}
        case.runs.append(Repeat(r, code, round(time.monotonic() - start, 3), str(file.relative_to(raw.parent)), metrics))
        outputs.append(output)
        if code != 0:
            why = f"timed out after {exp.timeout_s:g} s" if code == TIMED_OUT else f"exited with code {code}"
            case.problem = f"{exp.name} {params} {why}; last lines:\n{_last_lines(output)}"
            break
        missing = [m for m in exp.metrics if metrics[m.name] is None]
        if missing:
            case.problem = (f"{exp.name} {params}: metric {missing[0].name} (/{missing[0].regex}/) matched nothing in "
                            f"its output; last lines:\n{_last_lines(output)}")
            break
    for m in exp.metrics:
        got = [v for run in case.runs if (v := run.metrics.get(m.name)) is not None]
        if got and case.problem is None:
            case.metrics[m.name] = statistics.median(got)
    # Every repeat must pass the sanity checks: the worst repeat is the one shown.
    for output in outputs:
        result = check_sanity(exp.sanity, output)
        if not case.sanity or not all(s.ok for s in result):
            case.sanity = result
    return case


def planned(experiments: list[Experiment], quick: bool) -> list[tuple[Experiment, Params]]:
    """Every case a run of these experiments runs, in order (--quick: their quick grids)."""
    return [(e, p) for e in experiments for p in e.cases(quick)]


def run_all(experiments: list[Experiment], vals: Values, *, place: Place, raw: Path, quick: bool,
            out: IO[str], cases: list[Case] | None = None,
            mounts: Callable[[Experiment], tuple[str, ...]] = lambda e: ()) -> list[Case]:
    """Every case of the experiments (--quick: their quick grids, one repeat), in order; a failed case is
    recorded with why and the next one runs. Each case is appended to `cases` as it ends, so a caller
    interrupted midway (Ctrl-C) still has what ran."""
    plan = planned(experiments, quick)
    cases = [] if cases is None else cases
    for i, (exp, params) in enumerate(plan, 1):
        repeats = 1 if quick else exp.repeats
        shown = " ".join(f"{k}={v}" for k, v in params.items())
        out.write(f"[{i}/{len(plan)}] {exp.name} {shown} ({repeats} run{'s' * (repeats > 1)}) ... ")
        out.flush()
        case = run_case(exp, params, vals, place=place, raw=raw, repeats=repeats, mounts=mounts(exp))
        if case.problem:
            out.write(f"FAILED\n  {case.problem}\n")
        else:
            sane = "" if case.sane else "  (sanity FAILED: " + "; ".join(
                f"{s.name} {s.shown} not {s.bound}" for s in case.sanity if not s.ok) + ")"
            out.write(", ".join(f"{k} {v:g}{_unit(exp, k)}" for k, v in case.metrics.items()) + sane + "\n")
        cases.append(case)
    return cases


def _unit(exp: Experiment, metric: str) -> str:
    m = exp.metric(metric)
    return f" {m.unit}" if m and m.unit else ""
