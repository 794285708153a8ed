"""Tasks: shell, test."""
from __future__ import annotations

import shlex
import sys

from invoke import Exit

from .. import ROOT, containers, images, proc
from ..errors import KernellabError
from . import configured_target, task

GPU_MODE_HELP = "how the container gets the GPU: nvidia, cdi, devices, or none (default: the best doctor finds)"


def _gpu(gpu_mode):
    if gpu_mode is None:
        return True
    return False if gpu_mode == "none" else gpu_mode


@task(help={"target": "named target (default: this machine's)", "image": "run this image instead of a target's",
            "gpu_mode": GPU_MODE_HELP, "cmd": "a command to run instead of an interactive shell"})
def shell(c, target=None, image=None, gpu_mode=None, cmd=None):
    """Open a shell (or run --cmd) in a target's container: repo at /workspace, your UID, the GPU."""
    ref = image or images.image_for_target(configured_target(c, target))
    try:
        argv = shlex.split(cmd) if cmd else ["bash"]
    except ValueError as e:
        raise KernellabError(f"--cmd is not a valid command line ({e}); check its quotes.") from None
    code = containers.run(ref, argv, gpu=_gpu(gpu_mode), interactive=cmd is None)
    if code:
        raise Exit(code=code)


@task(help={"target": "named target (default: this machine's)", "image": "run in this image instead",
            "k": "pytest -k expression selecting ops/tests", "native": "run on this machine, without Docker",
            "gpu_mode": GPU_MODE_HELP, "suite": "what to run: kernels (default) or all (the whole tests/)"})
def test(c, target=None, image=None, k=None, native=False, gpu_mode=None, suite="kernels"):
    """Compile the kernels and check them against PyTorch, in the target's container (or --native)."""
    paths = ["tests/test_kernels.py"] if suite == "kernels" else ["tests"]
    args = ["-m", "pytest", *paths, "-q", "-rs", *(["-k", k] if k else [])]
    if native:
        code = proc.call([sys.executable, *args], cwd=ROOT)
    else:
        ref = image or images.image_for_target(configured_target(c, target))
        code = containers.run(ref, ["python", *args], gpu=_gpu(gpu_mode))
    if code:
        raise Exit(code=code)
