"""Reporting a run: what its tasks made, gathered into results/<run>/ and merged into one summary.

This module owns gather (each task's results and log copied from the shared run folder), record
(results/<run>/cluster.json, which --resume reads), merge (summary.md: the table the job's merger writes, the
same way for every job, then every task's outcome), the mergers of the kernel tests (a table of JUnit counts)
and of the bench (each GPU type merged, then across them), and the two ways a run ends: finish (the summary, and the tails of the logs
of tasks that left no results) and interrupted (after Ctrl-C: keep what had ended, exit 130).
"""
from __future__ import annotations

import datetime as dt
import importlib
import json
import shutil
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import IO, Callable, NoReturn, Sequence

from ..errors import ClusterError
from .follow import Outcome
from .plan import Plan

LOG_TAIL = 12


def finish(plan: Plan, local: Path, outcomes: list[Outcome], out: IO[str]) -> Path:
    """Gather and merge the ended run and print its summary; raise ClusterError naming the tasks that left no
    results (with the last lines of their logs printed) and `--resume RUN`."""
    gather(plan, outcomes, local)
    summary = merge(plan, outcomes, local)
    print(f"\n{summary}", file=out)
    print(f"results: {local}", file=out, flush=True)
    bad = [o for o in outcomes if not o.ok]
    if bad:
        lines = []
        for o in bad:
            lines.append(f"{o.task.key} {o.detail}" + (f"; last lines of {o.log}:\n" + _tail(o.log) if o.log else ""))
        print("\n".join(lines), file=out, flush=True)
        kept = sum(o.ok for o in outcomes)
        raise ClusterError(f"{len(bad)} of {len(outcomes)} task(s) did not finish with results "
                           f"({', '.join(f'{o.task.key}: {o.state}' for o in bad)}); the {kept} others' results are in "
                           f"{local}; `--resume {plan.run}` runs only the missing ones.")
    return local


def interrupted(plan: Plan, local: Path, outcomes: list[Outcome], jobs: list[str]) -> NoReturn:
    """After Ctrl-C: gather and merge what had ended (so --resume knows what is missing), then stop with 130."""
    gather(plan, outcomes, local)
    merge(plan, outcomes, local)
    kept = sum(o.ok for o in outcomes)
    raise ClusterError(f"interrupted: cancelled job(s) {', '.join(jobs)}; the {kept} task(s) that had finished "
                       f"are gathered in {local}; `--resume {plan.run}` runs the rest.", exit_code=130)


def gather(plan: Plan, outcomes: Sequence[Outcome], local: Path) -> None:
    """Copy each task's results and log from the shared run folder into results/<run>/, and write cluster.json."""
    local.mkdir(parents=True, exist_ok=True)
    for o in outcomes:
        src = plan.workspace / plan.results_of(o.task)
        dst = local / o.task.gpu / o.task.name
        if src.is_dir() and any(src.iterdir()):
            if dst.exists():
                shutil.rmtree(dst)
            shutil.copytree(src, dst)
        if o.log and Path(o.log).is_file():
            (local / "logs").mkdir(exist_ok=True)
            shutil.copy2(o.log, local / "logs" / f"{o.task.gpu}-{o.task.name}.log")
    record(plan, outcomes, local)


def record(plan: Plan, outcomes: Sequence[Outcome], local: Path) -> Path:
    """results/<run>/cluster.json: the run (its shared folder, image, jobs, the command line and checkout that planned
    it) and each task's outcome."""
    local.mkdir(parents=True, exist_ok=True)
    doc = {"run": plan.run, "job": plan.job, "rundir": plan.rundir, "runtime": plan.runtime,
           "gpu_mode": plan.gpu_mode,
           "image": plan.image, "jobs": plan.jobs, "select": plan.select, "argv": plan.argv,
           "checkout": plan.checkout.to_dict() if plan.checkout else None,
           "written": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
           "tasks": [{"gpu": o.task.gpu, "index": o.task.index, "name": o.task.name, "state": o.state,
                      "detail": o.detail, "status": o.status, "log": o.log} for o in outcomes]}
    path = local / "cluster.json"
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(doc, indent=1) + "\n")
    tmp.replace(path)
    return path


#: What writes a run's own part of the summary from (local folder, GPU types, each task's outcome): named by the job
#: (kernellab.jobs.Job.merger) as "module:function", carried in the run's plan, loaded here by name (the cluster code
#: imports none of them: a recipe run's is kernellab.recipes.on_cluster:merge).
Merger = Callable[[Path, Sequence[str], Sequence[Outcome]], str]


def merger(name: str) -> Merger:
    """The function a plan's merger names ("module:function")."""
    module, _, function = name.partition(":")
    try:
        found = getattr(importlib.import_module(module), function, None)
    except ImportError:
        found = None
    if not callable(found):
        raise ClusterError(f"the run's merger {name} is not a function of kernellab; the run was planned by another "
                           "kernellab.")
    return found


def merge(plan: Plan, outcomes: Sequence[Outcome], local: Path) -> str:
    """The run's summary.md: the job's own table (its merger's), then every task's outcome."""
    gpus = plan.gpus
    parts = [f"# {plan.job} run {plan.run} on {', '.join(gpus)} ({plan.runtime})", ""]
    if plan.merger:
        parts.append(merger(plan.merger)(local, gpus, outcomes))
    parts += ["", "## Tasks", "", "| GPU type | task | outcome | node | GPU | seconds |", "|---|---|---|---|---|---|"]
    for o in outcomes:
        s = o.status
        uuids = ", ".join(g.get("uuid", "") for g in s.get("gpus", [])) or "-"
        what = o.state + (f": {o.detail}" if o.detail else "")
        parts.append(f"| {o.task.gpu} | {o.task.name} | {what} | {s.get('host', '-')} | {uuids} | "
                     f"{s.get('seconds', '-')} |")
    text = "\n".join(parts) + "\n"
    (local / "summary.md").write_text(text)
    return text


def bench_tables(local: Path, gpus: Sequence[str], outcomes: Sequence[Outcome]) -> str:
    """A bench run's merger: each GPU type's ops as one bench run (its own summary.md), then the table across types
    and its plot (kernellab.bench.merge), which the run's summary shows."""
    from ..bench import merge as bench_merge
    from ..errors import BenchError

    missing = {g: [o.task.name for o in outcomes if o.task.gpu == g and not
                   (local / g / o.task.name / "results.json").exists()] for g in gpus}
    for g in gpus:
        if any((local / g).glob("*/results.json")):
            bench_merge.merge_gpu_type(local / g)
    try:
        page = bench_merge.merge_run(local, list(gpus), missing={g: m for g, m in missing.items() if m})
    except BenchError as e:  # no task left figures: the task table below says why
        return str(e)
    return page.read_text().split("\n", 1)[1].strip()   # below its own title: the run's summary has one


def test_table(local: Path, gpus: Sequence[str], outcomes: Sequence[Outcome]) -> str:
    """The kernel tests' merger: one row per op, a column per GPU type, passed / failed / skipped counts from each
    task's JUnit file."""
    names = list(dict.fromkeys(o.task.name for o in outcomes))
    by = {(o.task.gpu, o.task.name): o for o in outcomes}
    rows = ["| op | " + " | ".join(gpus) + " |", "|---|" + "---|" * len(gpus)]
    for name in names:
        cells = []
        for g in gpus:
            o = by.get((g, name))
            counts = junit_counts(local / g / name / "junit.xml")
            if counts is None:
                cells.append(o.state if o else "-")
            else:
                cells.append(f"{counts['passed']} passed, {counts['failed']} failed, {counts['skipped']} skipped")
        rows.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(rows)


def junit_counts(path: Path) -> dict[str, int] | None:
    """passed/failed/skipped from pytest's JUnit XML; None when the file is missing or unreadable."""
    try:
        root = ET.parse(path).getroot()
    except (OSError, ET.ParseError):
        return None
    suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
    total = sum(int(s.get("tests", 0)) for s in suites)
    failed = sum(int(s.get("failures", 0)) + int(s.get("errors", 0)) for s in suites)
    skipped = sum(int(s.get("skipped", 0)) for s in suites)
    return {"passed": total - failed - skipped, "failed": failed, "skipped": skipped}


def _tail(path: str, n: int = LOG_TAIL) -> str:
    try:
        lines = Path(path).read_text(errors="replace").splitlines()
    except OSError:
        return ""
    return "\n".join("    " + line for line in lines[-n:])
