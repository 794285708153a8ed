"""Tasks: shell, test."""
from __future__ import annotations

import sys

from invoke import Exit

from .. import ROOT, containers, images, proc
from ..errors import KernellabError
from . import ENGINE_HELP, GPU_MODE_HELP, configured_target, gpu_choice, task


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
            "engine": ENGINE_HELP})
def shell(c, target=None, image=None, gpu_mode=None, cmd=None, engine=None):
    """Open a shell (or run --cmd) in a target's container: repo at /workspace, your UID, the GPU."""
    if cmd is not None and not cmd.strip():
        raise KernellabError("--cmd is empty; give a command line, or leave --cmd out for an interactive shell.")
    ref = image or images.image_for_target(configured_target(c, target))
    code = containers.run(ref, shell_argv(cmd), gpu=gpu_choice(gpu_mode), interactive=cmd is None)
    if code:
        raise Exit(code=code)


@task(help={"target": "named target (default: this machine's)", "image": "run in this image instead",
            "k": "pytest -k expression selecting ops/tests", "native": "run on this machine, without Docker",
            "gpu_mode": GPU_MODE_HELP, "suite": "what to run: kernels (default) or all (the whole tests/)",
            "engine": ENGINE_HELP})
def test(c, target=None, image=None, k=None, native=False, gpu_mode=None, suite="kernels", engine=None):
    """Compile the kernels and check them against PyTorch, in the target's container (or --native)."""
    paths = ["tests/test_kernels.py"] if suite == "kernels" else ["tests"]
    args = ["-m", "pytest", *paths, "-q", "-rs", *(["-k", k] if k else [])]
    if native:
        code = proc.call([sys.executable, *args], cwd=ROOT)
    else:
        ref = image or images.image_for_target(configured_target(c, target))
        code = containers.run(ref, ["python", *args], gpu=gpu_choice(gpu_mode))
    if code:
        raise Exit(code=code)
