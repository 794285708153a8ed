"""The entry point of every cluster task, on its node: `python3 -m kernellab.cluster.node PLAN GPU INDEX`.

It needs only the standard library and kernellab's source (the run's workspace snapshot), because
the nodes' Python is rarely the user's. It starts the task in the image the runtime's way, then
writes the task's status file (exit code, node, the GPUs it was given, times) into the shared run
folder, which is how the submitting side knows a task's outcome without sacct.
"""
from __future__ import annotations

import json
import os
import shlex
import socket
import sys
import time
from pathlib import Path
from typing import Any, Mapping

from .. import gpu
from ..errors import KernellabError
from . import runtimes
from .plan import Plan, Task


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 3 or not args[2].isdigit():
        print("usage: python -m kernellab.cluster.node PLAN.json GPU_TYPE TASK_INDEX", file=sys.stderr)
        return 2
    plan = Plan.load(Path(args[0]))
    task = plan.task(args[1], int(args[2]))
    started = time.time()
    status: dict[str, Any] = {"run": plan.run, "gpu_type": task.gpu, "index": task.index, "name": task.name,
                              "host": socket.gethostname(), "runtime": plan.runtime,
                              "slurm_job": f"{os.environ.get('SLURM_ARRAY_JOB_ID', '?')}_{task.index}",
                              "started": started, "gpus": given_gpus(os.environ)}
    print(f"kernellab task {task.key} ({plan.job}, run {plan.run}) on {status['host']}, runtime {plan.runtime}, "
          f"GPUs {', '.join(g['uuid'] for g in status['gpus']) or 'none'}", flush=True)
    problem = runtimes.missing_tool(plan.runtime)
    if problem:
        print(f"kernellab: {problem}", file=sys.stderr, flush=True)
        code, status["error"] = 127, problem
    else:
        try:
            code = run(plan, task, status)
        except KernellabError as e:
            print(f"kernellab: {e}", file=sys.stderr, flush=True)
            code, status["error"] = e.exit_code or 1, str(e)
    status.update(exit=code, finished=time.time(), seconds=round(time.time() - started, 3))
    write_status(plan.status_file(task), status)
    return code


def run(plan: Plan, task: Task, status: dict[str, Any]) -> int:
    """Start the task in the image (or natively) and wait for it; its exit code. status gets the GPU mode
    a docker or podman container was given."""
    workspace, cache = plan.workspace, Path(os.environ.get("KERNELLAB_CACHE") or Path(plan.rundir).parent.parent / "cache")
    cache.mkdir(parents=True, exist_ok=True)
    (workspace / plan.results_of(task)).mkdir(parents=True, exist_ok=True)
    image = plan.image.get("path", "")
    from .. import proc

    if plan.runtime in ("docker", "podman"):
        return _engine_run(plan, task, cache, status)
    env = runtimes.container_env(task.env, os.environ)
    if plan.runtime == "none":
        child = {**os.environ, **task.env, "KERNELLAB_CACHE": str(cache),
                 "PYTHONPATH": os.pathsep.join(filter(None, [str(workspace / "src"), os.environ.get("PYTHONPATH")]))}
        return proc.call(runtimes.native(task.argv, plan.python), cwd=workspace, env=child)
    if plan.runtime == "charliecloud":
        driver = runtimes.driver_folder(Path(os.environ.get("TMPDIR", "/tmp")) / f"kernellab-driver-{os.getuid()}")
        argv = runtimes.charliecloud(image, task.argv, env, workspace, cache, driver)
        return proc.call(argv, env={"USER": os.environ.get("USER") or str(os.getuid())})
    if plan.runtime == "apptainer":
        return proc.call(runtimes.apptainer(image, task.argv, env, workspace, cache, bool(gpu.device_nodes())))
    if plan.runtime == "enroot":
        return proc.call(runtimes.enroot(image, task.argv, workspace, cache), env=env)
    raise KernellabError(f"runtime {plan.runtime} is not known to this kernellab.")


def _engine_run(plan: Plan, task: Task, cache: Path, status: dict[str, Any]) -> int:
    from .. import engine
    from ..container import runner

    eng = engine.by_name(plan.runtime)
    ensure_loaded(eng, plan.image)
    os.environ["KERNELLAB_CACHE"] = str(cache)
    mode = gpu_mode(plan, eng)
    status["gpu_mode"] = mode
    return runner.run(plan.image["id"], task.argv, gpu=False if mode == "none" else mode, env=task.env,
                          repo=plan.workspace, engine=eng)


def gpu_mode(plan: Plan, eng: Any) -> str:
    """The profile's GPU mode, else the best this node's engine offers, else "none": recorded in the task's
    status, since it decides which GPUs the container sees."""
    from ..container import runner

    return plan.gpu_mode or runner.best_gpu_mode(eng) or "none"


def ensure_loaded(eng: Any, image: Mapping[str, Any]) -> None:
    """Load the image from the run's bundle when this node's engine lacks it (once per node)."""
    if eng.exists(image["id"]):
        return
    bundle = Path(image.get("path") or "")
    inner = next((p for p in bundle.iterdir() if (p / "manifest.json").exists()), None) if bundle.is_dir() else None
    if not image.get("path"):
        raise KernellabError(f"image {image.get('ref')} ({image['id'][:19]}) is not in {eng.name} on node "
                             f"{socket.gethostname()}, and the profile says the nodes have it (load_images = false); "
                             "load it there (`invoke import-image BUNDLE`) or set load_images = true.")
    if inner is None:
        raise KernellabError(f"image {image['id'][:19]} is not on node {socket.gethostname()} and its bundle "
                             f"{bundle} is missing; is the shared folder shared with the nodes?")
    print(f"loading {image.get('ref')} from {inner} into {eng.name} on this node ...", flush=True)
    try:
        import zstandard  # noqa: F401  (kernellab's importer verifies every chunk on the way)

        from ..transfer import import_bundle

        import_bundle(inner, engine=eng)
    except ImportError:  # the node's Python lacks zstandard: the zstd tool decompresses the one stream
        from .. import proc

        chunks = sorted(str(p) for p in inner.glob("image.tar.zst.*"))
        load = " ".join(shlex.quote(a) for a in eng.load_argv())
        proc.run(["bash", "-c", f'cat "$@" | zstd -dcq | {load}', "load", *chunks], timeout=3600)
    if not eng.exists(image["id"]):
        raise KernellabError(f"loading {inner} did not give image {image['id'][:19]} on {socket.gethostname()}.")


def given_gpus(environ: Mapping[str, str]) -> list[dict[str, str]]:
    """The GPUs this task was given (Slurm's selection, else all the node has): index, name, UUID."""
    gpus = gpu.host_gpus()
    try:
        chosen = gpu.selected_gpus(environ=environ)
    except KernellabError:
        chosen = None
    return [{"index": str(g.index), "name": g.name, "uuid": g.uuid} for g in gpus
            if chosen is None or str(g.index) in chosen]


def write_status(path: Path, status: Mapping[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    tmp.write_text(json.dumps(status, indent=1) + "\n")
    os.replace(tmp, path)


if __name__ == "__main__":
    sys.exit(main())
