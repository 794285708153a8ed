"""Task: submit (any command on the cluster's GPUs). The `--on slurm` of every run task is kernellab.places.Cluster."""
from __future__ import annotations

import dataclasses
from typing import Any

from .. import jobs
from ..errors import ClusterUsageError
from ..places import Flags, choose
from . import task


@task(place=True, help={"tasks": "tasks per GPU type (each gets KERNELLAB_TASK=0..N-1)",
                        "on": "the scheduler: slurm (the default here: submit always runs on a cluster)"})
def submit(c: Any, tasks: int = 1, *, where: Flags) -> None:
    """Run any command on the cluster's GPUs: `invoke submit --gpus h100 -- 'python my_bench.py --n 3'`.

    The command (everything after --) runs with bash -c in the target's image, at /workspace (the
    repository as it was at submission), once per task and GPU type; KERNELLAB_RESULTS names the folder
    it should write into, and that folder comes back under results/<run>/<gpu-type>/task-<i>/.
    """
    command = (getattr(c, "remainder", "") or "").strip()
    if not command and not where.resume:
        raise ClusterUsageError("`invoke submit` needs a command after `--`, e.g. `invoke submit -- python my_bench.py`.")
    choose(c, dataclasses.replace(where, on=where.on or "slurm")).run(jobs.submit(command, copies=tasks))
