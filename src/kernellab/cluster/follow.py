"""Following a submitted run until every task has ended, and each task's outcome.

This module owns the poll loop (follow: each change of a task's state and how many tasks are in each, in
the words of PROGRESS), Ctrl-C while following (it cancels the jobs and raises Interrupted with the
outcomes so far), and what a task's ending means (outcome: its status file first, then Slurm's last
state, its log and how long a status file may lag). kernellab.cluster.runs starts and resumes runs
with it; kernellab.cluster.report gathers and merges the Outcomes it returns.
"""
from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Sequence

from . import slurm
from .plan import Plan, Task

#: Seconds between two looks at the queue (KERNELLAB_POLL_S overrides it: tests poll faster).
POLL_S = 5.0
#: How long a task's status file may lag behind Slurm saying the task ended (NFS attribute caches).
STATUS_GRACE_S = 15.0


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


class Interrupted(Exception):
    """Ctrl-C while following: the outcomes so far (unfinished tasks cancelled) and the jobs cancelled."""

    def __init__(self, outcomes: list[Outcome], jobs: list[str]):
        super().__init__("interrupted")
        self.outcomes, self.jobs = outcomes, jobs


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


def follow(plan: Plan, pairs: Sequence[tuple[Task, str]], out: IO[str], poll_s: float | None) -> list[Outcome]:
    """Poll until every (task, its array job) has ended, printing each change of state and then how many
    tasks are in each; Ctrl-C cancels the jobs (raising Interrupted)."""
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
        done = [outcome(plan, t, ended[t.key]) if t.key in ended else
                Outcome(t, "cancelled", "was cancelled (Ctrl-C)", {}, _log(plan, t)) for t in tasks]
        raise Interrupted(done, jobs) from None
    return [outcome(plan, t, ended[t.key]) for t in tasks]


#: Slurm's final states for a task it stopped from outside, as (outcome, detail): these say why a task ended
#: even when its status file records the signal's exit code.
STOPPED = {"TIMEOUT": ("timeout", "ran past its time limit"),
           "CANCELLED": ("cancelled", "was cancelled"),
           "PREEMPTED": ("preempted", "was preempted by another job"),
           "NODE_FAIL": ("failed", "lost its node (NODE_FAIL)"),
           "OUT_OF_MEMORY": ("failed", "ran out of memory"),
           "DEADLINE": ("cancelled", "never finished: it reached its deadline (DEADLINE)")}


def outcome(plan: Plan, task: Task, st: slurm.TaskState) -> Outcome:
    """How a task ended: its status file says, else Slurm's last state of it (st) and whether it left a log."""
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
        if st.state in STOPPED:
            # Slurm stopped it (SIGTERM at the time limit, scancel, ...); the runner can outlive its command by
            # a moment and record the signal's exit (-15), but why it stopped is Slurm's to say.
            state, detail = STOPPED[st.state]
            return Outcome(task, state, detail, status, log)
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
    if not log and PROGRESS.get(st.state) == "pending":
        # Left the queue while pending (scancel, an administrator, a dependency never satisfied): it never
        # started, so nothing is missing from the shared folder.
        return Outcome(task, "cancelled", "ended before it started: it left the queue while pending, without a "
                                          "log (cancelled with scancel or removed by the scheduler); "
                                          f"`--resume {plan.run}` runs it again", {}, log)
    words = {**STOPPED, "BOOT_FAIL": ("failed", "never started: its node failed to boot (BOOT_FAIL)"),
             "FAILED": ("failed", f"failed before kernellab's task runner reported (exit {st.exit or '?'})")}
    if st.state in words:
        state, detail = words[st.state]
        return Outcome(task, state, detail, {}, log)
    return Outcome(task, "lost", f"ended ({st.state.lower()}) but its status file never appeared at {path}: is "
                                 f"`shared` ({shared}) really shared with the nodes?", {}, log)


def _log(plan: Plan, task: Task) -> str:
    logs = sorted((Path(plan.rundir) / "logs").glob(plan.log_glob(task)), key=lambda p: p.stat().st_mtime)
    return str(logs[-1]) if logs else ""

