"""Slurm: the sbatch script of one GPU type's array, submission, task states, cancellation.

Only the client commands are used (sbatch, squeue, scontrol, scancel, sacct), never slurmrestd: they
are what every cluster's login node has. A task's state comes from squeue while it is queued or
running, then from `scontrol show job` (for MinJobAge after it ends), and its exit code from the
status file the task itself writes. sacct is a fallback, not a need (many clusters run without
accounting): it is asked only about an array job of which squeue and scontrol know no task any more,
and only where `scontrol show config` names an accounting storage (decided once per process).
"""
from __future__ import annotations

import functools
import re
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from .. import proc
from ..errors import ClusterError, CommandError, KernellabError
from .plan import Plan
from .profile import Profile

#: States after which a task will not run again by itself.
FINAL = {"COMPLETED", "FAILED", "TIMEOUT", "CANCELLED", "PREEMPTED", "NODE_FAIL", "OUT_OF_MEMORY",
         "BOOT_FAIL", "DEADLINE", "SPECIAL_EXIT", "REVOKED"}


@dataclass(frozen=True)
class TaskState:
    state: str          # PENDING, RUNNING, COMPLETED, FAILED, TIMEOUT, ... (Slurm's words)
    reason: str = ""    # squeue's reason (Resources, Priority) or the node it runs on
    exit: str = ""      # scontrol's or sacct's ExitCode, code:signal

    @property
    def final(self) -> bool:
        return self.state in FINAL


def array_spec(indices: Sequence[int], throttle: int = 0) -> str:
    """--array's value: 0-3 for a full range, 1,3 for a resume, %N to throttle."""
    ids = sorted(set(indices))
    if not ids:
        raise ValueError("an array needs at least one task")
    spec = f"{ids[0]}-{ids[-1]}" if ids == list(range(ids[0], ids[-1] + 1)) and len(ids) > 1 else ",".join(map(str, ids))
    return f"{spec}%{throttle}" if throttle else spec


def script(profile: Profile, plan: Plan, gpu: str, indices: Sequence[int], *, src: str | None = None) -> str:
    """The batch script of gpu's array (the tasks `indices`): options, modules, then kernellab's task runner."""
    rundir = Path(plan.rundir)
    opts = [f"--job-name=kl-{plan.job}-{gpu}-{plan.run}", f"--array={array_spec(indices, profile.throttle)}",
            f"--output={rundir}/logs/{gpu}-%a-%A.log", f"--time={profile.time}", "--ntasks=1",
            # Not the submitter's folder: a checkout's docker/ would shadow the docker SDK in the node's Python.
            f"--chdir={rundir}"]
    opts += [f"--partition={profile.partition}"] * bool(profile.partition)
    opts += [f"--account={profile.account}"] * bool(profile.account)
    opts += [f"--qos={profile.qos}"] * bool(profile.qos)
    opts += profile.gpu_options(gpu)
    lines = ["#!/bin/bash", f"# kernellab {plan.job} run {plan.run}: GPU type {gpu}, runtime {plan.runtime}"]
    lines += [f"#SBATCH {o}" for o in [*opts, *profile.sbatch]]
    if profile.modules:  # before `set -u`: some Lmod and environment-modules versions trip over unset variables
        lines += ["module load " + " ".join(shlex.quote(m) for m in profile.modules)]
    lines += ["set -uo pipefail"]
    src = src or str(plan.workspace / "src")
    lines += [f"export PYTHONPATH={shlex.quote(src)}",
              f"exec {shlex.quote(profile.python)} -m kernellab.cluster.node "
              f"{shlex.quote(str(rundir / 'plan.json'))} {shlex.quote(gpu)} \"$SLURM_ARRAY_TASK_ID\""]
    return "\n".join(lines) + "\n"


def reachable() -> None:
    """Slurm answers here (sbatch is installed and the controller replies), else one sentence."""
    if not proc.which("sbatch"):
        raise ClusterError("Slurm's sbatch is not installed here; run this on the cluster's login node "
                           "(or `module load slurm`).")
    try:
        proc.run(["sinfo", "-h", "-o", "%P"], timeout=60)
    except (CommandError, ClusterError) as e:
        raise ClusterError(f"Slurm does not answer here (sinfo failed: {_last(e)}); is slurmctld up and "
                           "this machine in the cluster's slurm.conf?") from None


def submit(path: Path) -> str:
    """sbatch --parsable; the job ID."""
    try:
        r = proc.run(["sbatch", "--parsable", str(path)], timeout=120)
    except CommandError as e:
        raise ClusterError(f"sbatch refused {path.name}: {_last(e)}.") from None
    job = r.stdout.strip().split(";")[0]
    if not re.fullmatch(r"\d+", job):
        raise ClusterError(f"sbatch answered {r.stdout.strip()!r}, not a job ID.")
    return job


def states(jobs: Sequence[str]) -> dict[tuple[str, int], TaskState]:
    """The state of every task of the array jobs, keyed by (array job ID, task index)."""
    found: dict[tuple[str, int], TaskState] = {}
    if not jobs:
        return found
    q = proc.run(["squeue", "-h", "-r", "-j", ",".join(jobs), "-o", "%i|%T|%R"], check=False, timeout=60)
    for line in q.stdout.splitlines():
        parsed = parse_squeue(line)
        if parsed:
            found[parsed[0]] = parsed[1]
    for job in jobs:
        s = proc.run(["scontrol", "show", "job", "-o", job], check=False, timeout=60)
        for line in s.stdout.splitlines():
            parsed = parse_scontrol(line)
            if parsed and parsed[0] not in found:
                found[parsed[0]] = parsed[1]
    known = {job for job, _ in found}
    for key, st in accounted([j for j in jobs if j not in known]).items():
        # Only an ended state: slurmctld knows every live job, so a RUNNING or PENDING in the accounting
        # database for one it has forgotten is stale (a "runaway" record), and following it would never end.
        if st.final:
            found.setdefault(key, st)
    return found


def _array_record(line: str) -> tuple[tuple[str, int], list[str]] | None:
    """`123_4|A|B` (squeue's and sacct's -P form) -> ((123, 4), [A, B]); anything else (a plain job, a
    pending range `123_[5-9]`, a step) -> None."""
    parts = line.strip().split("|")
    m = re.fullmatch(r"(\d+)_(\d+)", parts[0]) if len(parts) == 3 else None
    return ((m.group(1), int(m.group(2))), parts[1:]) if m else None


def parse_squeue(line: str) -> tuple[tuple[str, int], TaskState] | None:
    """`123_4|RUNNING|node7` -> ((123, 4), RUNNING on node7); a pending array's `123_[5-9]` is expanded by -r."""
    record = _array_record(line)
    if not record:
        return None
    key, (state, reason) = record
    return key, TaskState(state, reason.strip("()"))


def parse_scontrol(line: str) -> tuple[tuple[str, int], TaskState] | None:
    """One `scontrol show job -o` record -> ((array job, task), state with reason and exit code)."""
    fields = dict(f.split("=", 1) for f in line.split() if "=" in f)
    job, task = fields.get("ArrayJobId"), fields.get("ArrayTaskId", "")
    if not job or not task.isdigit():
        return None
    return (job, int(task)), TaskState(fields.get("JobState", "UNKNOWN"), fields.get("Reason", ""),
                                      fields.get("ExitCode", ""))


@functools.lru_cache(maxsize=1)
def accounting() -> bool:
    """Whether the cluster keeps accounting that sacct can read (asked once per process; never raises)."""
    if not proc.which("sacct"):
        return False
    try:
        r = proc.run(["scontrol", "show", "config"], check=False, timeout=60)
    except KernellabError:
        return False
    m = re.search(r"^AccountingStorageType\s*=\s*(\S+)", r.stdout, re.MULTILINE)
    return r.ok and m is not None and m.group(1) != "accounting_storage/none"


def accounted(jobs: Sequence[str]) -> dict[tuple[str, int], TaskState]:
    """sacct's state of every task of the array jobs; nothing without accounting or when sacct refuses."""
    found: dict[tuple[str, int], TaskState] = {}
    if not jobs or not accounting():
        return found
    try:  # -X: the allocation only, not its steps (123_4.batch); -j sets the start time to the epoch
        r = proc.run(["sacct", "-n", "-P", "-X", "-j", ",".join(jobs), "-o", "JobID,State,ExitCode"],
                     check=False, timeout=60)
    except KernellabError:
        return found
    for line in r.stdout.splitlines() if r.ok else []:
        parsed = parse_sacct(line)
        if parsed:
            found[parsed[0]] = parsed[1]
    return found


def parse_sacct(line: str) -> tuple[tuple[str, int], TaskState] | None:
    """`123_4|CANCELLED by 0|0:15` -> ((123, 4), CANCELLED, exit 0:15); plain jobs and `123_[5-9]` are skipped."""
    record = _array_record(line)
    if not record or not record[1][0].strip():
        return None
    key, (state, code) = record
    return key, TaskState(state.split()[0], "", code.strip())


def cancel(jobs: Sequence[str]) -> None:
    """scancel every job (all its tasks); a job already gone is not an error."""
    if jobs:
        proc.run(["scancel", *jobs], check=False, timeout=60)


def _last(e: Exception) -> str:
    lines = [line for line in str(getattr(e, "tail", "") or e).splitlines() if line.strip()]
    return lines[-1].strip() if lines else str(e)
