"""`invoke profile` and `invoke sanitize`: Nsight Compute and compute-sanitizer on an op, in the target's
container (the image's tools, else the host's Nsight Compute mounted read-only) or natively."""
from __future__ import annotations

import sys
from pathlib import Path

from invoke import Context, Exit

from .. import ROOT, nvtools, proc, pythonpath
from ..errors import KernellabError
from ..opspec import KERNELS
from . import ENGINE_HELP, GPU_MODE_HELP, configured_target, gpu_choice, task


@task(iterable=["impl"], help={
    "k": "the op to profile (a folder under kernels/)",
    "shape": "an index into the op's bench shapes, or k=v,k=v (default: the first bench shape)",
    "dtype": "the dtype (default: the op's first bench dtype)",
    "impl": "only this candidate or baseline (repeatable; default: all of them)",
    "set": "Nsight Compute's section set: basic (plus warp stalls) or full",
    "kernel": "only kernels whose function name matches this regular expression",
    "trace": "a torch.profiler trace (Chrome trace JSON) per implementation instead: needs no counters",
    "out": "the run's folder (default results/<date>-<time>-<gpu>); reports go to its profile/",
    "native": "profile with this Python's torch and this machine's ncu, without a container",
    "target": "image target to profile in (default: kernellab.target in invoke.yaml, else this machine's)",
    "kernels": "another kernels folder (for a container: one inside the repository)",
    "gpu_mode": GPU_MODE_HELP,
    "engine": ENGINE_HELP,
})
def profile(c: Context, k: str | None = None, shape: str | None = None, dtype: str | None = None,
            impl: list[str] | None = None, set: str = "basic", kernel: str | None = None, trace: bool = False,
            out: str | None = None, native: bool = False, target: str | None = None, kernels: str | None = None,
            gpu_mode: str | None = None, engine: str | None = None) -> None:
    """Nsight Compute on the launches the benchmark times: candidate and baselines side by side."""
    from ..profile import SETS

    if not k:
        raise KernellabError("name the op to profile: `invoke profile -k OP`.")
    if set not in SETS:
        raise KernellabError(f"unknown --set {set!r}; use one of {', '.join(SETS)}.")
    argv = ["-k", k, "--set", set, *(["--shape", shape] if shape else []), *(["--dtype", dtype] if dtype else []),
            *[a for i in impl or [] for a in ("--impl", i)], *(["--kernel", kernel] if kernel else []),
            *(["--trace"] if trace else [])]
    _run(c, "kernellab.profile", argv, k, out=out, native=native, target=target, kernels=kernels,
         gpu_mode=gpu_mode, mount_ncu=not trace)


@task(help={
    "k": "the op whose checks run under compute-sanitizer (a folder under kernels/)",
    "tool": "memcheck, racecheck, initcheck, synccheck, or all",
    "native": "run with this Python's torch and this machine's compute-sanitizer, without a container",
    "target": "image target to run in (default: kernellab.target in invoke.yaml, else this machine's)",
    "kernels": "another kernels folder (for a container: one inside the repository)",
    "gpu_mode": GPU_MODE_HELP,
    "engine": ENGINE_HELP,
})
def sanitize(c: Context, k: str | None = None, tool: str = "memcheck", native: bool = False, target: str | None = None,
             kernels: str | None = None, gpu_mode: str | None = None, engine: str | None = None) -> None:
    """An op's checks under compute-sanitizer: each error with kernel, file:line and test case."""
    from ..sanitize import TOOLS

    if not k:
        raise KernellabError("name the op to check: `invoke sanitize -k OP`.")
    if tool not in (*TOOLS, "all"):
        raise KernellabError(f"unknown --tool {tool!r}; use one of {', '.join(TOOLS)} or all.")
    _run(c, "kernellab.sanitize", ["-k", k, "--tool", tool], k, native=native, target=target, kernels=kernels,
         gpu_mode=gpu_mode, mount_ncu=False)


def _run(c: Context, module: str, argv: list[str], op: str, *, out: str | None = None, native: bool,
         target: str | None, kernels: str | None, gpu_mode: str | None, mount_ncu: bool) -> None:
    from ..watch import find_op

    root = Path(kernels).resolve() if kernels else KERNELS
    find_op(root, op)  # a typo is answered here, before a container starts
    if native:
        argv += [*(["--kernels", str(root)] if kernels else []), *(["--out", str(Path(out).resolve())] if out else [])]
        code = proc.call([sys.executable, "-m", module, *argv], cwd=ROOT, env={"PYTHONPATH": pythonpath()})
    else:
        from .. import containers

        for name, value in (("--kernels", kernels and root), ("--out", out and Path(out).resolve())):
            if value:
                if not Path(value).is_relative_to(ROOT):
                    raise KernellabError(f"{value} is outside the repository, which is all the container sees; "
                                         "move it under the repository or use --native.")
                argv += [name, f"{containers.WORKSPACE}/{Path(value).relative_to(ROOT)}"]
        mounts: list[str] = []
        host_ncu = nvtools.find("ncu") if mount_ncu else None
        if host_ncu is not None:  # used only when the image has no ncu of its own
            mounts.append(f"{nvtools.install_folder(host_ncu)}:{nvtools.HOST_NCU}:ro")
        code = containers.run_in_target(configured_target(c, target), ["python", "-m", module, *argv],
                                        gpu=gpu_choice(gpu_mode), mounts=mounts)
    if code:
        raise Exit(code=code)
