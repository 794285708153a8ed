"""`invoke bench`: check and time kernels against their baselines, in the target's container."""
from __future__ import annotations

import os
import sys
from pathlib import Path

from invoke import Context, Exit

from .. import ROOT, gpu
from ..errors import BenchError
from . import ENGINE_HELP, configured_target, task
from .cluster import CLUSTER_HELP, on_cluster


@task(help={
    "target": "image target to run in (default: kernellab.target in invoke.yaml)",
    "k": "only ops whose name matches EXPR",
    "native": "run in this Python, without a container (CPU timing where no GPU is visible)",
    "quick": "first bench shape only, short measurements: a sanity check, not a figure to publish",
    "compare": "an earlier run (results/<run>): each row same/faster/slower; exit 1 on a regression",
    "out": "the run's folder (default results/<date>-<gpu>)",
    "gpu_index": "host GPU index to bench on, as nvidia-smi numbers them (default: Slurm's GPUs or "
                 "CUDA_VISIBLE_DEVICES where set, else all; the run uses the first)",
    "engine": ENGINE_HELP,
    **CLUSTER_HELP,
})
def bench(c: Context, target: str | None = None, k: str | None = None, native: bool = False,
          quick: bool = False, compare: str | None = None, out: str | None = None, gpu_index: str | None = None,
          engine: str | None = None, on: str | None = None, gpus: str | None = None, profile: str | None = None,
          dry_run: bool = False, resume: str | None = None) -> None:
    """Benchmark kernels against PyTorch baselines; results in results/<run>/ (--on slurm: across GPU types)."""
    if on or resume:
        if compare or out:
            raise BenchError("--compare and --out are for runs on this machine; a cluster run writes "
                             "results/<run>/ and `invoke bench --compare` works on it afterwards.")
        on_cluster(c, "bench", on=on or "slurm", gpus=gpus, profile=profile, dry_run=dry_run, resume=resume,
                   target=target, select=k, quick=quick)
        return
    argv = [*(["-k", k] if k else []), *(["--quick"] if quick else [])]
    if native:
        from ..bench import main

        argv += [*(["--compare", compare] if compare else []), *(["--out", out] if out else [])]
        if gpu_index is not None:
            _show_only(gpu_index)
        code = main(argv)
    else:
        from ..containers import run_in_target

        # The container sees the repository at /workspace: hand it paths relative to the repository.
        argv += [*(["--compare", _in_repo(compare)] if compare else []), *(["--out", _in_repo(out)] if out else [])]
        code = run_in_target(configured_target(c, target), ["python", "-m", "kernellab.bench", *argv], gpu=True,
                             **({"gpu_index": gpu_index} if gpu_index is not None else {}))
    if code:
        raise Exit(code=code)


def _show_only(gpu_index: str) -> None:
    """Let this process's CUDA see only the GPUs --gpu-index names (bench --native runs in this process).

    In this process rather than a child, as --native always has (one Python, its exit code and Ctrl-C
    as they were): CUDA reads CUDA_VISIBLE_DEVICES when it first initializes, which the bench does,
    so setting it now works as long as nothing here has used CUDA yet.
    """
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        raise BenchError("CUDA is already initialized in this process, so --gpu-index cannot take effect; "
                         "run `CUDA_VISIBLE_DEVICES=N invoke bench --native` instead.")
    os.environ["CUDA_VISIBLE_DEVICES"] = gpu.visible_devices(gpu_index)


def _in_repo(path: str) -> str:
    resolved = Path(path).resolve()
    if not resolved.exists() and (ROOT / "results" / path).exists():
        resolved = (ROOT / "results" / path).resolve()  # a bare run name
    if not resolved.is_relative_to(ROOT):
        raise BenchError(f"{path} is outside the repository, which is all the container sees; "
                         "copy it under results/ or use --native.")
    return str(resolved.relative_to(ROOT))
