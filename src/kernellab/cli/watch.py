"""`invoke watch`: rebuild and check one op on every save, in the target's container or natively."""
from __future__ import annotations

import sys
from pathlib import Path

from invoke import Context, Exit

from .. import ROOT, proc, pythonpath
from ..errors import KernellabError
from ..opspec import KERNELS
from . import ENGINE_HELP, GPU_MODE_HELP, configured_target, gpu_choice, task


@task(help={
    "k": "the op to watch: a folder under kernels/ (its sources, reference.py, op.toml; and kernels/_common/)",
    "bench": "after the checks pass, time one quick benchmark shape",
    "native": "watch with this Python's torch, without a container",
    "target": "image target to watch in (default: kernellab.target in invoke.yaml, else this machine's)",
    "kernels": "another kernels folder (for a container: one inside the repository)",
    "gpu_mode": GPU_MODE_HELP,
    "engine": ENGINE_HELP,
})
def watch(c: Context, k: str | None = None, bench: bool = False, native: bool = False, target: str | None = None,
          kernels: str | None = None, gpu_mode: str | None = None, engine: str | None = None) -> None:
    """On every save of an op's files: rebuild what changed, rerun its checks, print the result (Ctrl-C stops)."""
    from ..watch import explain_exit, find_op

    if not k:
        raise KernellabError("name the op to watch: `invoke watch -k OP` (the ops are the folders under kernels/).")
    root = Path(kernels).resolve() if kernels else KERNELS
    find_op(root, k)  # a typo is answered here, before a container starts
    argv = ["-k", k, *(["--bench"] if bench else [])]
    if native:
        argv += ["--kernels", str(root)] if kernels else []
        code = proc.call([sys.executable, "-m", "kernellab.watch", *argv], cwd=ROOT, env={"PYTHONPATH": pythonpath()})
        where = "the watcher"
    else:
        from .. import containers, images

        if kernels:
            if not root.is_relative_to(ROOT):
                raise KernellabError(f"{kernels} is outside the repository, which is all the container sees; "
                                     "move it under the repository or use --native.")
            argv += ["--kernels", f"{containers.WORKSPACE}/{root.relative_to(ROOT)}"]
        image = images.image_for_target(configured_target(c, target))
        gpu = gpu_choice(gpu_mode)
        # On a terminal the container gets one too (a cleared screen per round, Ctrl-C through it).
        tty = sys.stdin.isatty() and sys.stdout.isatty()
        code = containers.run(image, ["python", "-m", "kernellab.watch", *argv], gpu=gpu, interactive=tty)
        where = "the container"
    reason = explain_exit(code, where)
    if reason:
        raise Exit(f"kernellab: watch: {reason}", code=code if 0 < code < 256 else 1)
    if code:
        raise Exit(code=code)
