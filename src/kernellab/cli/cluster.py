"""Task: submit (any command on the cluster's GPUs). The `--on slurm` of every run task is kernellab.places.Cluster."""
from __future__ import annotations

import sys
from typing import Any

from .. import jobs
from ..errors import ClusterUsageError
from ..places import PLACE_HELP, Cluster
from . import configured_target, task

#: Help for the cluster flags (recipe run's too).
CLUSTER_HELP = {k: PLACE_HELP[k] for k in ("on", "gpus", "profile", "dry_run", "resume")}


@task(help={**CLUSTER_HELP, "tasks": "tasks per GPU type (each gets KERNELLAB_TASK=0..N-1)",
            "target": "image target the tasks run in (default: kernellab.target in invoke.yaml)",
            "engine": PLACE_HELP["engine"]})
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
        raise ClusterUsageError("`invoke submit` needs a command after `--`, e.g. `invoke submit -- python my_bench.py`.")
    if on != "slurm":
        raise ClusterUsageError(f"--on {on}: kernellab submits to slurm (Kubernetes users: `scheduler = \"kubernetes\"` "
                           "in the profile and --dry-run).")
    Cluster(target=configured_target(c, target), gpus=gpus, profile=profile,
            configured=c.config.get("kernellab", {}).get("cluster"), resume=resume, dry_run=dry_run,
            argv=list(sys.argv), tasks=tasks).run(jobs.submit(command))
