"""Starting and resuming a cluster run: the entry points that kernellab.places.Cluster uses for every job.

`--on slurm` calls start(); `--resume RUN` calls resume(). This module owns what happens before a run is
followed: the Request, the task list (each of the job's parts, kernellab.jobs.Part, once per GPU type), the
image made ready for the nodes' runtime, `--dry-run` (the batch scripts or Job manifests, printed), the
repository snapshot and the submission (all of a run or none of it), and, for --resume, which tasks
to gather, follow or submit again. kernellab.cluster.follow follows the submitted tasks to their
outcomes; kernellab.cluster.report gathers and merges them. The names callers used from this module
(Outcome, Interrupted, gather, record, merge, junit_counts, progress_word, progress_counts) are imported
from there and stay importable here.

The run's shared folder (`<shared>/runs/<run>/`) holds the plan, the repository snapshot, the batch
scripts, each task's log and status file; the local `results/<run>/` gets every task's results, the
logs, the merged summary and cluster.json (the plan and each task's outcome), which --resume reads.
"""
from __future__ import annotations

import datetime as dt
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Sequence

from .. import ROOT
from ..errors import ClusterError, ClusterUsageError
from ..jobs import Part
from ..provenance import Checkout
from . import images, kube, slurm
from .follow import Interrupted, Outcome, follow, outcome, progress_counts, progress_word
from .plan import Plan, Task, passed_env, snapshot, task_argv
from .profile import Profile
from .report import finish, gather, interrupted, junit_counts, merge, record

__all__ = ["Interrupted", "Outcome", "Request", "gather", "junit_counts", "merge", "progress_counts",
           "progress_word", "record", "resume", "start"]


@dataclass
class Request:
    """What the user asked for: a job's parts (kernellab.jobs.Part) on the profile's GPU types."""

    job: str                             # what runs: test, bench, submit, recipe, ... (the run's name and title)
    parts: Sequence[Part]                # each runs once per GPU type
    merger: str | None = None            # "module:function" writing the run's own part of the summary
    gpus: str | None = None              # --gpus h100,a100 (default: every type in the profile)
    select: str | None = None            # -k, as recorded
    target: str | None = None            # the image target
    image: str | None = None             # an image reference instead of the target's (a recipe's built image)
    dry_run: bool = False
    argv: Sequence[str] = ()


def start(req: Request, profile: Profile, *, out: IO[str] | None = None, poll_s: float | None = None) -> Path:
    """Plan, convert, submit and follow a run; gather and merge what it made; return results/<run>/.

    Raises ClusterError (after gathering) when a task did not finish with results.
    """
    out = out or sys.stdout
    gpus = profile.choose_gpus(req.gpus)
    run = _run_name(req.job)
    rundir = profile.shared / "runs" / run
    tasks = _tasks(req, run, gpus)
    plan = Plan(run=run, job=req.job, rundir=str(rundir), runtime=profile.runtime, gpu_mode=profile.gpu_mode,
                image={}, tasks=tasks, select=req.select, argv=list(req.argv), python=profile.python,
                merger=req.merger, checkout=None if req.dry_run else Checkout.here())
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
        outcomes = follow(plan, [(t, plan.jobs[t.gpu][-1]) for t in plan.tasks], out, poll_s)
    except Interrupted as e:
        interrupted(plan, local, e.outcomes, e.jobs)
    except KeyboardInterrupt:  # Ctrl-C after submitting, before following began: nothing had ended yet
        jobs = [job for ids in plan.jobs.values() for job in ids]
        slurm.cancel(jobs)
        interrupted(plan, local, [Outcome(t, "cancelled", "was cancelled (Ctrl-C)") for t in plan.tasks], jobs)
    return finish(plan, local, outcomes, out)


def resume(run: str, profile: Profile, *, out: IO[str] | None = None, poll_s: float | None = None) -> Path:
    """Finish an earlier run: gather tasks that ended since, follow those still queued or running, and
    submit again only the ones that left no results; then gather and merge the whole run."""
    out = out or sys.stdout
    local = Path(run) if Path(run).is_dir() else ROOT / "results" / run
    saved = local / "cluster.json"
    if not saved.is_file():
        raise ClusterUsageError(f"{saved} does not exist; --resume takes a run that `--on slurm` made "
                           "(a folder under results/ with a cluster.json).")
    data = json.loads(saved.read_text())
    plan = Plan.load(Path(data["rundir"]) / "plan.json")
    outcomes = {o.task.key: o for o in _earlier(plan, data)}
    open_ = [t for t in plan.tasks if not (t.key in outcomes and outcomes[t.key].ok)]
    if not open_:
        print(f"nothing to resume: every task of {plan.run} has its results.", file=out)
        return local
    slurm.reachable()
    latest = {g: jobs[-1] for g, jobs in plan.jobs.items() if jobs}
    active = slurm.states(list(latest.values()))
    following: list[tuple[Task, str]] = []
    again: list[Task] = []
    for t in open_:
        st = active.get((latest.get(t.gpu, ""), t.index))
        if _finished_ok(plan, t):  # it ended after the submitting process had gone
            outcomes[t.key] = outcome(plan, t, slurm.TaskState("COMPLETED"))
        elif st is not None and not st.final:
            following.append((t, latest[t.gpu]))
        else:
            again.append(t)
    if following:
        print(f"following {len(following)} task(s) still in Slurm ({', '.join(t.key for t, _ in following)})",
              file=out)
    if again:
        print(f"resuming {plan.run}: {len(again)} task(s) left ({', '.join(t.key for t in again)})", file=out, flush=True)
        for t in again:
            plan.status_file(t).unlink(missing_ok=True)
        by_gpu: dict[str, list[int]] = {}
        for t in again:
            by_gpu.setdefault(t.gpu, []).append(t.index)
        _submit(plan, profile, by_gpu, out)
        following += [(t, plan.jobs[t.gpu][-1]) for t in again]
    try:
        followed = follow(plan, following, out, poll_s)
    except Interrupted as e:
        outcomes.update({o.task.key: o for o in e.outcomes})
        interrupted(plan, local, [outcomes[t.key] for t in plan.tasks if t.key in outcomes], e.jobs)
    for o in followed:
        outcomes[o.task.key] = o
    return finish(plan, local, [outcomes[t.key] for t in plan.tasks], out)


def _finished_ok(plan: Plan, task: Task) -> bool:
    path = plan.status_file(task)
    try:
        return bool(path.exists() and json.loads(path.read_text()).get("exit") == 0)
    except ValueError:
        return False


# ---------------------------------------------------------------- planning


def _run_name(kind: str) -> str:
    from ..bench.runner import run_name

    return run_name(dt.datetime.now(dt.timezone.utc), f"slurm-{kind}")


def _tasks(req: Request, run: str, gpus: Sequence[str]) -> list[Task]:
    """Each part once per GPU type, numbered within the type (KERNELLAB_TASK)."""
    if not req.parts:
        raise ClusterUsageError(f"`{req.job}` has nothing to run on the cluster.")
    base = passed_env()
    tasks = []
    for gpu in gpus:
        for i, part in enumerate(req.parts):
            argv, env = task_argv(part.argv, run, gpu, part.name)
            tasks.append(Task(gpu, i, part.name, argv, {**base, **env, **part.env, "KERNELLAB_TASK": str(i)}))
    return tasks


def _image(profile: Profile, target: str | None, gpus: Sequence[str], out: IO[str], *,
           explicit: bool = False) -> dict[str, Any]:
    """The image the tasks run in, made ready for the nodes' runtime: the target's, or (explicit) a reference."""
    from .. import engine
    from ..image.builder import image_for_target

    eng = engine.current()
    image = eng.image(target) if explicit and target else image_for_target(target, eng)
    ref = image.ref
    for note in images.check_archs(images.inspect(image, eng), list(gpus)):
        print(f"note: {note}", file=out)
    prepared = images.prepare(profile, image, eng)
    how = ("the nodes' engines have it (load_images = false)" if not prepared.path else
           "reused" if prepared.reused else f"converted in {prepared.seconds:.1f} s")
    print(f"image {ref} ({images.short(prepared.id)}) for {profile.runtime}: {prepared.path or ref} ({how})", file=out,
          flush=True)
    return {"ref": prepared.ref, "id": prepared.id, "path": prepared.path, "arch_list": prepared.arch_list,
            "kind": prepared.target_kind, "convert_s": round(prepared.seconds, 3), "reused": prepared.reused}


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
        from ..image.builder import image_for_target

        eng = engine.current()
        image = image_for_target(target, eng)
        return {"ref": image.ref, "id": image.id, "path": str(images.product(profile, image.id))}
    except Exception:  # no engine or no image here: the script still shows its shape
        return {"ref": f"kernellab:{target or '<target>'}", "id": "<image-id>", "path": "<converted image>"}


# ---------------------------------------------------------------- submitting


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


def _earlier(plan: Plan, data: dict[str, Any]) -> list[Outcome]:
    """The outcomes an earlier run recorded in its cluster.json, for --resume."""
    by = {(t.gpu, t.index): t for t in plan.tasks}
    return [Outcome(by[(r["gpu"], r["index"])], r["state"], r.get("detail", ""), r.get("status", {}), r.get("log", ""))
            for r in data.get("tasks", []) if (r["gpu"], r["index"]) in by]
