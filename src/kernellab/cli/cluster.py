"""Task: submit (any command on the cluster's GPUs); the `--on slurm` path of test and bench lives here too."""
from __future__ import annotations

from typing import Any

from invoke import Context

from ..errors import ClusterError
from . import ENGINE_HELP, configured_target, task

#: Help for the flags test, bench and submit share when they run on a cluster.
CLUSTER_HELP = {
    "on": "run on a cluster: slurm (the profile, cluster.toml, says how; docs/cluster.md)",
    "gpus": "GPU types from the profile, comma-separated (default: every type it names)",
    "profile": "the cluster profile (default: invoke config kernellab.cluster, $KERNELLAB_CLUSTER, ./cluster.toml)",
    "dry_run": "print the batch scripts (or Kubernetes Jobs) and submit nothing",
    "resume": "an earlier cluster run (results/<run>): submit only its tasks that left no results",
}


def on_cluster(c: Context, kind: str, *, on: str | None, gpus: str | None = None, profile: str | None = None,
               dry_run: bool = False, resume: str | None = None, target: str | None = None,
               select: str | None = None, quick: bool = False, command: tuple[str, ...] = (),
               tasks: int = 1) -> None:
    """Run `kind` (test, bench, submit) on the cluster the profile describes; one report in results/<run>/."""
    from ..cluster import profile as profiles
    from ..cluster import runs

    if on not in (None, "slurm"):
        raise ClusterError(f"--on {on}: kernellab submits to slurm (Kubernetes users: `scheduler = \"kubernetes\"` "
                           "in the profile and --dry-run).")
    prof = profiles.load(profiles.find(profile, c.config.get("kernellab", {}).get("cluster")))
    if resume:
        runs.resume(resume, prof)
        return
    import sys

    req = runs.Request(kind=kind, gpus=gpus, select=select, quick=quick, command=command, tasks=tasks,
                       target=configured_target(c, target), dry_run=dry_run, argv=sys.argv)
    runs.start(req, prof)


@task(help={**CLUSTER_HELP, "tasks": "tasks per GPU type (each gets KERNELLAB_TASK=0..N-1)",
            "target": "image target the tasks run in (default: kernellab.target in invoke.yaml)",
            "engine": ENGINE_HELP})
def submit(c: Any, on: str = "slurm", gpus: str | None = None, tasks: int = 1, profile: str | None = None,
           dry_run: bool = False, resume: str | None = None, target: str | None = None,
           engine: str | None = None) -> None:
    """Run any command on the cluster's GPUs: `invoke submit --gpus h100 -- 'python my_bench.py --n 3'`.

    The command (everything after --) runs with bash -c in the target's image, at /workspace (the
    repository as it was at submission), once per task and GPU type; KERNELLAB_RESULTS names the folder
    it should write into, and that folder comes back under results/<run>/<gpu-type>/task-<i>/.
    """
    command = (getattr(c, "remainder", "") or "").strip()
    if not command and not resume:
        raise ClusterError("`invoke submit` needs a command after `--`, e.g. `invoke submit -- python my_bench.py`.")
    on_cluster(c, "submit", on=on, gpus=gpus, profile=profile, dry_run=dry_run, resume=resume, target=target,
               command=("bash", "-c", command), tasks=tasks)
