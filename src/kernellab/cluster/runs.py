"""A cluster run from submission to one report: plan, convert, submit, follow, gather, merge, resume.

`invoke test|bench|submit --on slurm` call start(); `--resume RUN` calls resume(). The run's shared
folder (`<shared>/runs/<run>/`) holds the plan, the repository snapshot, the batch scripts, each
task's log and status file; the local `results/<run>/` gets every task's results, the logs, the
merged summary and cluster.json (the plan and each task's outcome), which --resume reads.
"""
from __future__ import annotations

import datetime as dt
import json
import shutil
import sys
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, NoReturn, Sequence

from .. import ROOT, opspec
from ..errors import ClusterError
from . import images, kube, slurm
from .plan import Plan, Task, exact_select, passed_env, snapshot, task_argv
from .profile import Profile

#: Seconds between two looks at the queue (KERNELLAB_POLL_S overrides it: tests poll faster).
POLL_S = 5.0
#: How long a task's status file may lag behind Slurm saying the task ended (NFS attribute caches).
STATUS_GRACE_S = 15.0
LOG_TAIL = 12


@dataclass
class Request:
    """What the user asked for: `invoke test|bench|submit --on slurm ...`."""

    kind: str                            # test | bench | submit | recipe
    gpus: str | None = None              # --gpus h100,a100 (default: every type in the profile)
    select: str | None = None            # -k
    quick: bool = False                  # bench --quick
    command: Sequence[str] = ()          # submit -- CMD
    tasks: int = 1                       # submit --tasks N
    target: str | None = None            # the image target
    image: str | None = None             # an image reference instead of the target's (a recipe's built image)
    names: Sequence[str] = ()            # recipe: its experiments, one task each per GPU type
    dry_run: bool = False
    argv: Sequence[str] = ()


@dataclass
class Outcome:
    task: Task
    state: str                           # done | failed | timeout | cancelled | preempted | lost
    detail: str = ""
    status: dict[str, Any] = field(default_factory=dict)
    log: str = ""

    @property
    def ok(self) -> bool:
        return self.state == "done"


def start(req: Request, profile: Profile, *, out: IO[str] | None = None, poll_s: float | None = None) -> Path:
    """Plan, convert, submit and follow a run; gather and merge what it made; return results/<run>/.

    Raises ClusterError (after gathering) when a task did not finish with results.
    """
    out = out or sys.stdout
    gpus = profile.choose_gpus(req.gpus)
    run = _run_name(req.kind)
    rundir = profile.shared / "runs" / run
    tasks = _tasks(req, run, gpus)
    plan = Plan(run=run, kind=req.kind, rundir=str(rundir), runtime=profile.runtime, gpu_mode=profile.gpu_mode,
                image={}, tasks=tasks, select=req.select, argv=list(req.argv), python=profile.python)
    if req.dry_run:
        _dry_run(plan, profile, req, out)
        return rundir
    if profile.scheduler != "slurm":
        raise ClusterError(f"{profile.path} names scheduler {profile.scheduler}: kernellab renders its Job "
                           "manifests with --dry-run (apply them with kubectl) and submits only to Slurm.")
    slurm.reachable()
    if profile.runtime != "none":
        plan.image = _image(profile, req.image or req.target, gpus, out, explicit=req.image is not None)
    try:
        count = snapshot(plan.workspace, ROOT)
    except OSError as e:
        raise ClusterError(f"cannot write the run's folder {rundir} ({e.strerror}); `shared` in {profile.path} "
                           "must be a folder this user can write and every node sees.") from None
    print(f"run {run}: {len(tasks)} task(s) on {', '.join(gpus)} through {profile.runtime}; "
          f"{count} files of the repository in {plan.workspace}", file=out, flush=True)
    local = ROOT / "results" / run
    _submit(plan, profile, {g: [t.index for t in plan.tasks_of(g)] for g in gpus}, out)
    try:
        # Recorded now, so that --resume can take this run over if this process dies (a dropped SSH session).
        record(plan, [Outcome(t, "submitted") for t in plan.tasks], local)
        outcomes = _follow(plan, [(t, plan.jobs[t.gpu][-1]) for t in plan.tasks], out, poll_s)
    except Interrupted as e:
        _interrupted(plan, profile, local, e.outcomes, e.jobs, out)
    except KeyboardInterrupt:  # Ctrl-C after submitting, before following began: nothing had ended yet
        jobs = [job for ids in plan.jobs.values() for job in ids]
        slurm.cancel(jobs)
        _interrupted(plan, profile, local, [Outcome(t, "cancelled", "was cancelled (Ctrl-C)") for t in plan.tasks],
                     jobs, out)
    return _finish(plan, profile, local, outcomes, out)


def resume(run: str, profile: Profile, *, out: IO[str] | None = None, poll_s: float | None = None) -> Path:
    """Finish an earlier run: gather tasks that ended since, follow those still queued or running, and
    submit again only the ones that left no results; then gather and merge the whole run."""
    out = out or sys.stdout
    local = Path(run) if Path(run).is_dir() else ROOT / "results" / run
    record = local / "cluster.json"
    if not record.is_file():
        raise ClusterError(f"{record} does not exist; --resume takes a run that `--on slurm` made "
                           "(a folder under results/ with a cluster.json).")
    data = json.loads(record.read_text())
    plan = Plan.load(Path(data["rundir"]) / "plan.json")
    outcomes = {o.task.key: o for o in _earlier(plan, data)}
    open_ = [t for t in plan.tasks if not (t.key in outcomes and outcomes[t.key].ok)]
    if not open_:
        print(f"nothing to resume: every task of {plan.run} has its results.", file=out)
        return local
    slurm.reachable()
    latest = {g: jobs[-1] for g, jobs in plan.jobs.items() if jobs}
    active = slurm.states(list(latest.values()))
    follow: list[tuple[Task, str]] = []
    again: list[Task] = []
    for t in open_:
        st = active.get((latest.get(t.gpu, ""), t.index))
        if _finished_ok(plan, t):  # it ended after the submitting process had gone
            outcomes[t.key] = _outcome(plan, t, slurm.TaskState("COMPLETED"))
        elif st is not None and not st.final:
            follow.append((t, latest[t.gpu]))
        else:
            again.append(t)
    if follow:
        print(f"following {len(follow)} task(s) still in Slurm ({', '.join(t.key for t, _ in follow)})", file=out)
    if again:
        print(f"resuming {plan.run}: {len(again)} task(s) left ({', '.join(t.key for t in again)})", file=out, flush=True)
        for t in again:
            plan.status_file(t).unlink(missing_ok=True)
        by_gpu: dict[str, list[int]] = {}
        for t in again:
            by_gpu.setdefault(t.gpu, []).append(t.index)
        _submit(plan, profile, by_gpu, out)
        follow += [(t, plan.jobs[t.gpu][-1]) for t in again]
    try:
        followed = _follow(plan, follow, out, poll_s)
    except Interrupted as e:
        outcomes.update({o.task.key: o for o in e.outcomes})
        _interrupted(plan, profile, local, [outcomes[t.key] for t in plan.tasks if t.key in outcomes], e.jobs, out)
    for o in followed:
        outcomes[o.task.key] = o
    return _finish(plan, profile, local, [outcomes[t.key] for t in plan.tasks], out)


def _finished_ok(plan: Plan, task: Task) -> bool:
    path = plan.status_file(task)
    try:
        return bool(path.exists() and json.loads(path.read_text()).get("exit") == 0)
    except ValueError:
        return False


def _interrupted(plan: Plan, profile: Profile, local: Path, outcomes: list[Outcome], jobs: list[str],
                 out: IO[str]) -> NoReturn:
    """After Ctrl-C: gather and merge what had ended (so --resume knows what is missing), then stop with 130."""
    gather(plan, outcomes, local)
    merge(plan, outcomes, local)
    kept = sum(o.ok for o in outcomes)
    raise ClusterError(f"interrupted: cancelled job(s) {', '.join(jobs)}; the {kept} task(s) that had finished "
                       f"are gathered in {local}; `--resume {plan.run}` runs the rest.", exit_code=130)


# ---------------------------------------------------------------- planning


def _run_name(kind: str) -> str:
    from ..bench.runner import run_name

    return run_name(dt.datetime.now(dt.timezone.utc), f"slurm-{kind}")


def _tasks(req: Request, run: str, gpus: Sequence[str]) -> list[Task]:
    base = passed_env()
    if req.kind == "submit":
        if req.tasks < 1:
            raise ClusterError(f"--tasks {req.tasks}: give 1 or more tasks per GPU type.")
        named = [(f"task-{i}", "") for i in range(req.tasks)]
    elif req.kind == "recipe":
        named = [(name, "") for name in req.names]
    else:
        specs = opspec.discover(select=req.select)
        if not specs:
            raise ClusterError(f"no op matches -k {req.select!r}; the ops are the folders under kernels/.")
        names = [s.name for s in opspec.discover()]
        named = [(s.name, exact_select(s.name, names)) for s in specs]
    tasks = []
    for gpu in gpus:
        for i, (name, select) in enumerate(named):
            argv, env = task_argv(req.kind, run, gpu, name, select=select, quick=req.quick, command=req.command)
            tasks.append(Task(gpu, i, name, argv, {**base, **env, "KERNELLAB_TASK": str(i)}))
    return tasks


def _image(profile: Profile, target: str | None, gpus: Sequence[str], out: IO[str], *,
           explicit: bool = False) -> dict[str, Any]:
    """The image the tasks run in, made ready for the nodes' runtime: the target's, or (explicit) a reference."""
    from .. import engine
    from ..images import image_for_target

    eng = engine.current()
    ref = target if explicit and target else image_for_target(target, eng)
    for note in images.check_archs(images.inspect(ref, eng), list(gpus)):
        print(f"note: {note}", file=out)
    prepared = images.prepare(profile, ref, eng)
    how = ("the nodes' engines have it (load_images = false)" if not prepared.path else
           "reused" if prepared.reused else f"converted in {prepared.seconds:.1f} s")
    print(f"image {ref} ({images.short(prepared.id)}) for {profile.runtime}: {prepared.path or ref} ({how})", file=out,
          flush=True)
    return {"ref": prepared.ref, "id": prepared.id, "path": prepared.path, "arch_list": prepared.arch_list,
            "kind": prepared.kind, "convert_s": round(prepared.seconds, 3), "reused": prepared.reused}


def _dry_run(plan: Plan, profile: Profile, req: Request, out: IO[str]) -> None:
    plan.image = _image_placeholder(profile, req.target)
    if profile.scheduler == "kubernetes":
        for gpu in plan.gpus:
            print(kube.job_manifest(plan, profile, gpu), file=out)
        return
    for gpu in plan.gpus:
        print(f"# ---- {Path(plan.rundir) / (gpu + '.sbatch')}", file=out)
        print(slurm.script(profile, plan, gpu, [t.index for t in plan.tasks_of(gpu)]), file=out)
    print(f"# {len(plan.tasks)} task(s); nothing was converted or submitted (--dry-run).", file=out)


def _image_placeholder(profile: Profile, target: str | None) -> dict[str, Any]:
    """The image as far as this machine knows it (its ID when the engine has it), for --dry-run."""
    if profile.runtime == "none":
        return {}
    try:
        from .. import engine
        from ..images import image_for_target

        eng = engine.current()
        ref = image_for_target(target, eng)
        image_id = eng.must_inspect(ref)["Id"]
        return {"ref": ref, "id": image_id, "path": str(images.product(profile, image_id))}
    except Exception:  # no engine or no image here: the script still shows its shape
        return {"ref": f"kernellab:{target or '<target>'}", "id": "<image-id>", "path": "<converted image>"}


# ---------------------------------------------------------------- submitting and following


def _submit(plan: Plan, profile: Profile, indices: dict[str, list[int]], out: IO[str]) -> None:
    submitted: list[str] = []
    try:
        for gpu, idx in indices.items():
            path = Path(plan.rundir) / f"{gpu}.sbatch"
            path.write_text(slurm.script(profile, plan, gpu, idx))
            (Path(plan.rundir) / "logs").mkdir(exist_ok=True)
            job = slurm.submit(path)
            submitted.append(job)
            plan.jobs.setdefault(gpu, []).append(job)
            plan.save()
            print(f"submitted job {job}: {len(idx)} task(s) on {gpu} ({', '.join(plan.task(gpu, i).name for i in idx)})",
                  file=out, flush=True)
    except BaseException:
        slurm.cancel(submitted)  # half a run submitted is worse than none: the user reruns it whole
        if submitted:
            print(f"cancelled job(s) {', '.join(submitted)} (scancel): the run was not submitted whole",
                  file=out, flush=True)
        raise


#: Slurm's states in the words of a run's progress (any other state is printed as Slurm names it).
PROGRESS = {"PENDING": "pending", "REQUEUED": "pending", "CONFIGURING": "running", "RUNNING": "running",
            "COMPLETING": "running", "COMPLETED": "done", "FAILED": "failed", "NODE_FAIL": "failed",
            "OUT_OF_MEMORY": "failed", "BOOT_FAIL": "failed", "TIMEOUT": "timed out", "CANCELLED": "cancelled",
            "PREEMPTED": "preempted", "SUSPENDED": "suspended"}


def progress_word(st: slurm.TaskState) -> str:
    """`pending (resources)`, `running on node17`, `done`, `failed`, ...: one task's state as printed."""
    word = PROGRESS.get(st.state, st.state.lower())
    if st.state == "PENDING" and st.reason and st.reason != "None":  # Slurm's "(None)": no reason yet
        return f"{word} ({st.reason})"
    if st.state == "RUNNING" and st.reason:
        return f"{word} on {st.reason}"
    return word


def progress_counts(words: Sequence[str]) -> str:
    """`2 done, 1 running, 1 pending of 4`: how many tasks are in each state, in the order a run goes."""
    order = ["done", "running", "pending", "failed", "timed out", "cancelled", "preempted"]
    heads = [next((o for o in order if w.startswith(o)), w) for w in words]
    counts = {h: heads.count(h) for h in dict.fromkeys(order + heads) if h in heads}
    return ", ".join(f"{n} {h}" for h, n in counts.items()) + f" of {len(words)}"


def _follow(plan: Plan, pairs: Sequence[tuple[Task, str]], out: IO[str], poll_s: float | None) -> list[Outcome]:
    """Poll until every (task, its array job) has ended, printing each change of state and then how many
    tasks are in each; Ctrl-C cancels the jobs."""
    import os

    poll = poll_s if poll_s is not None else float(os.environ.get("KERNELLAB_POLL_S") or POLL_S)
    tasks = [t for t, _ in pairs]
    job_of = {t.key: job for t, job in pairs}
    jobs = list(dict.fromkeys(job_of.values()))
    seen: dict[str, str] = {}
    last: dict[str, slurm.TaskState] = {}
    gone: dict[str, int] = {}
    ended: dict[str, slurm.TaskState] = {}
    try:
        while len(ended) < len(tasks):
            changed = False
            # Only the arrays with tasks still to end: an ended array is not asked about again.
            found = slurm.states(list(dict.fromkeys(job_of[t.key] for t in tasks if t.key not in ended)))
            for t in tasks:
                if t.key in ended:
                    continue
                st = found.get((job_of[t.key], t.index))
                if st is None:  # left the queue and scontrol's memory: the status file decides
                    gone[t.key] = gone.get(t.key, 0) + 1
                    if gone[t.key] >= 2 or plan.status_file(t).exists():
                        ended[t.key] = last.get(t.key, slurm.TaskState("UNKNOWN"))
                        seen[t.key], changed = "ended", True  # its outcome comes from its status file
                    continue
                last[t.key] = st
                word = progress_word(st)
                if seen.get(t.key) != word:
                    seen[t.key], changed = word, True
                    print(f"  {t.key}: {word}", file=out, flush=True)
                if st.final:
                    ended[t.key] = st
            if changed and len(tasks) > 1:
                print(f"  [{progress_counts([seen.get(t.key, 'pending') for t in tasks])}]", file=out, flush=True)
            if len(ended) < len(tasks):
                time.sleep(poll)
    except KeyboardInterrupt:
        slurm.cancel(jobs)
        left = [t.key for t in tasks if t.key not in ended]
        print(f"interrupted: cancelled job(s) {', '.join(jobs)} (scancel), which stopped {len(left)} "
              f"unfinished task(s) ({', '.join(left)})", file=out, flush=True)
        done = [_outcome(plan, t, ended[t.key]) if t.key in ended else
                Outcome(t, "cancelled", "was cancelled (Ctrl-C)", {}, _log(plan, t)) for t in tasks]
        raise Interrupted(done, jobs) from None
    return [_outcome(plan, t, ended[t.key]) for t in tasks]


class Interrupted(Exception):
    """Ctrl-C while following: the outcomes so far (unfinished tasks cancelled) and the jobs cancelled."""

    def __init__(self, outcomes: list[Outcome], jobs: list[str]):
        super().__init__("interrupted")
        self.outcomes, self.jobs = outcomes, jobs


def _outcome(plan: Plan, task: Task, st: slurm.TaskState) -> Outcome:
    path = plan.status_file(task)
    deadline = time.monotonic() + (STATUS_GRACE_S if st.state == "COMPLETED" else 0)
    while not path.exists() and time.monotonic() < deadline:
        time.sleep(0.5)
    log = _log(plan, task)
    status = json.loads(path.read_text()) if path.exists() else {}
    if status:
        code = status.get("exit")
        if code == 0:
            return Outcome(task, "done", "", status, log)
        return Outcome(task, "failed", status.get("error") or f"exited with {code}", status, log)
    shared = Path(plan.rundir).parent.parent
    # Slurm opens a started task's log before anything runs: a task that ran (or failed) without one
    # wrote into a folder this machine does not see.
    unseen = (f"without writing its log or status file into {plan.rundir}: is `shared` ({shared}) really shared "
              "with the nodes, at the same path on each?")
    if not log and st.state == "FAILED":
        return Outcome(task, "failed", f"failed (exit {st.exit or '?'}) {unseen}", {}, log)
    if not log and st.state in ("COMPLETED", "UNKNOWN"):
        return Outcome(task, "lost", f"ended ({st.state.lower()}) {unseen}", {}, log)
    words = {"TIMEOUT": ("timeout", "ran past its time limit"),
             "CANCELLED": ("cancelled", "was cancelled"),
             "PREEMPTED": ("preempted", "was preempted by another job"),
             "NODE_FAIL": ("failed", "lost its node (NODE_FAIL)"),
             "OUT_OF_MEMORY": ("failed", "ran out of memory"),
             "BOOT_FAIL": ("failed", "never started: its node failed to boot (BOOT_FAIL)"),
             "DEADLINE": ("cancelled", "never finished: it reached its deadline (DEADLINE)"),
             "FAILED": ("failed", f"failed before kernellab's task runner reported (exit {st.exit or '?'})")}
    if st.state in words:
        state, detail = words[st.state]
        return Outcome(task, state, detail, {}, log)
    return Outcome(task, "lost", f"ended ({st.state.lower()}) but its status file never appeared at {path}: is "
                                 f"`shared` ({shared}) really shared with the nodes?", {}, log)


def _log(plan: Plan, task: Task) -> str:
    logs = sorted((Path(plan.rundir) / "logs").glob(plan.log_glob(task)), key=lambda p: p.stat().st_mtime)
    return str(logs[-1]) if logs else ""


def _earlier(plan: Plan, data: dict[str, Any]) -> list[Outcome]:
    by = {(t.gpu, t.index): t for t in plan.tasks}
    return [Outcome(by[(r["gpu"], r["index"])], r["state"], r.get("detail", ""), r.get("status", {}), r.get("log", ""))
            for r in data.get("tasks", []) if (r["gpu"], r["index"]) in by]


# ---------------------------------------------------------------- gathering and merging


def _finish(plan: Plan, profile: Profile, local: Path, outcomes: list[Outcome], out: IO[str]) -> Path:
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
    """results/<run>/cluster.json: the run (its shared folder, image, jobs) and each task's outcome."""
    local.mkdir(parents=True, exist_ok=True)
    doc = {"run": plan.run, "kind": plan.kind, "rundir": plan.rundir, "runtime": plan.runtime,
           "gpu_mode": plan.gpu_mode,
           "image": plan.image, "jobs": plan.jobs, "select": plan.select, "argv": plan.argv,
           "written": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
           "tasks": [{"gpu": o.task.gpu, "index": o.task.index, "name": o.task.name, "state": o.state,
                      "detail": o.detail, "status": o.status, "log": o.log} for o in outcomes]}
    path = local / "cluster.json"
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(doc, indent=1) + "\n")
    tmp.replace(path)
    return path


def merge(plan: Plan, outcomes: Sequence[Outcome], local: Path) -> str:
    """The run's summary.md: the kind's own table (bench figures, test counts), then every task's outcome."""
    gpus = plan.gpus
    parts = [f"# {plan.kind} run {plan.run} on {', '.join(gpus)} ({plan.runtime})", ""]
    if plan.kind == "bench":
        _merge_bench(local, gpus, outcomes)
    elif plan.kind == "test":
        parts.append(_test_table(local, gpus, outcomes))
    elif plan.kind == "recipe":
        # The recipe layer judges each GPU type's cases (imported here: recipes build on the cluster, not
        # the other way round, and only a recipe run needs it).
        from ..recipes import on_cluster

        parts.append(on_cluster.merge(local, gpus, [(o.task.gpu, o.task.name, o.status) for o in outcomes]))
    parts += ["", "## Tasks", "", "| GPU type | task | outcome | node | GPU | seconds |", "|---|---|---|---|---|---|"]
    for o in outcomes:
        s = o.status
        uuids = ", ".join(g.get("uuid", "") for g in s.get("gpus", [])) or "-"
        what = o.state + (f": {o.detail}" if o.detail else "")
        parts.append(f"| {o.task.gpu} | {o.task.name} | {what} | {s.get('host', '-')} | {uuids} | "
                     f"{s.get('seconds', '-')} |")
    text = "\n".join(parts) + "\n"
    if plan.kind != "bench":
        (local / "summary.md").write_text(text)
    else:  # the bench merge wrote summary.md; the task table follows it
        with open(local / "summary.md", "a") as f:
            f.write("\n" + "\n".join(parts[parts.index("## Tasks"):]) + "\n")
        text = (local / "summary.md").read_text()
    return text


def _merge_bench(local: Path, gpus: Sequence[str], outcomes: Sequence[Outcome]) -> None:
    """Each GPU type's ops as one bench run, then the run's table across types and its plot (kernellab.bench.merge)."""
    from ..bench import merge as bench_merge
    from ..errors import BenchError

    missing = {g: [o.task.name for o in outcomes if o.task.gpu == g and not
                   (local / g / o.task.name / "results.json").exists()] for g in gpus}
    for g in gpus:
        if any((local / g).glob("*/results.json")):
            bench_merge.merge_gpu_type(local / g)
    try:
        bench_merge.merge_run(local, list(gpus), missing={g: m for g, m in missing.items() if m})
    except BenchError as e:  # no task left figures: the task table below says why
        (local / "summary.md").write_text(f"# bench run {local.name}\n\n{e}\n")


def _test_table(local: Path, gpus: Sequence[str], outcomes: Sequence[Outcome]) -> str:
    """One row per op, a column per GPU type: passed / failed / skipped counts from each task's JUnit file."""
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
