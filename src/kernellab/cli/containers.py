"""Tasks: shell, test."""
from __future__ import annotations

import sys

from invoke import Exit

from .. import ROOT, containers, gpu, images, proc
from ..errors import KernellabError
from . import ENGINE_HELP, GPU_MODE_HELP, configured_target, gpu_choice, task
from .cluster import CLUSTER_HELP, on_cluster

#: Help for --gpu-index (shell, test; bench says the same).
GPU_INDEX_HELP = "host GPU index (or N,M) to use, as nvidia-smi numbers them (default: Slurm's GPUs or " \
                 "CUDA_VISIBLE_DEVICES where set, else all)"


def shell_argv(cmd: str | None) -> list[str]:
    """What the container runs: bash, or --cmd as one bash command line (`cd build && make` works).

    --cmd goes to bash whole, as with `docker run IMAGE sh -c CMD`, so operators, pipes, quotes and
    variables mean what they mean in a shell (and bash reports its own syntax errors). Not a login
    shell (-l): Debian's /etc/profile, read by login shells, resets PATH and would hide the image's
    /opt/venv/bin and CUDA bin, which the image puts on PATH through ENV.
    """
    return ["bash", "-c", cmd] if cmd else ["bash"]


@task(help={"target": "named target (default: this machine's)", "image": "run this image instead of a target's",
            "gpu_mode": GPU_MODE_HELP, "cmd": "a command to run instead of an interactive shell",
            "gpu_index": GPU_INDEX_HELP, "engine": ENGINE_HELP})
def shell(c, target=None, image=None, gpu_mode=None, cmd=None, gpu_index=None, engine=None):
    """Open a shell (or run --cmd) in a target's container: repo at /workspace, your UID, the GPU."""
    if cmd is not None and not cmd.strip():
        raise KernellabError("--cmd is empty; give a command line, or leave --cmd out for an interactive shell.")
    ref = image or images.image_for_target(configured_target(c, target))
    code = containers.run(ref, shell_argv(cmd), gpu=gpu_choice(gpu_mode), interactive=cmd is None,
                          gpu_index=gpu_index)
    if code:
        raise Exit(code=code)


@task(help={"target": "named target (default: this machine's)", "image": "run in this image instead",
            "k": "pytest -k expression selecting ops/tests", "native": "run on this machine, without Docker",
            "gpu_mode": GPU_MODE_HELP, "suite": "what to run: kernels (default) or all (the whole tests/)",
            "gpu_index": GPU_INDEX_HELP, "engine": ENGINE_HELP, **CLUSTER_HELP})
def test(c, target=None, image=None, k=None, native=False, gpu_mode=None, suite="kernels", gpu_index=None,
         engine=None, on=None, gpus=None, profile=None, dry_run=False, resume=None):
    """Compile the kernels and check them against PyTorch, in the target's container (or --native, or --on slurm)."""
    if on or resume:
        return on_cluster(c, "test", on=on or "slurm", gpus=gpus, profile=profile, dry_run=dry_run, resume=resume,
                          target=target, select=k)
    paths = ["tests/test_kernels.py"] if suite == "kernels" else ["tests"]
    args = ["-m", "pytest", *paths, "-q", "-rs", *(["-k", k] if k else [])]
    if native:
        env = {"CUDA_VISIBLE_DEVICES": gpu.visible_devices(gpu_index)} if gpu_index is not None else None
        code = proc.call([sys.executable, *args], cwd=ROOT, env=env)
    else:
        ref = image or images.image_for_target(configured_target(c, target))
        code = containers.run(ref, ["python", *args], gpu=gpu_choice(gpu_mode), gpu_index=gpu_index)
    if code:
        raise Exit(code=code)
