"""Where a job runs: this machine (Native), a target's container (Container) here or on another machine's Docker
engine (--host ssh://...), or a cluster (Cluster).

Every run task takes the same place flags: the fields of Flags, declared once here (their help in PLACE_HELP), added
to each task by `kernellab.cli.task(place=True)`. choose() turns them into one place; `place.run(job)` returns the
job's exit code. Repository paths in a job's argv are mapped here,
in one place: as they are natively, under /workspace in a container, and refused when a container
cannot see them. A test hands its own place through invoke's config (`kernellab.place`), so no test
patches how a task starts a container.
"""
from __future__ import annotations

import shlex
import sys
import threading
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Protocol, Sequence

from . import ROOT, gpu, jobs, proc, pythonpath
from .container import runner
from .engine import Engine, Image, resolve_engine
from .errors import ClusterUsageError, UsageError
from .jobs import Job

#: One help text per place flag, shared by every run task.
PLACE_HELP = {
    "native": "run on this machine with this Python, without a container",
    "target": "image target to run in (default: kernellab.target in invoke.yaml, else this machine's)",
    "image": "run in this image instead of a target's",
    "engine": "container engine: docker or podman (default: invoke config kernellab.engine, KERNELLAB_ENGINE, "
              "else the first that answers)",
    "gpu_mode": "how the container gets the GPU: nvidia, cdi, devices, or none (default: the best doctor finds)",
    "gpu_index": "host GPU index (or N,M) to use, as nvidia-smi numbers them (default: Slurm's GPUs or "
                 "CUDA_VISIBLE_DEVICES where set, else all)",
    "host": "run on another machine's Docker engine: ssh://[user@]host[:port] (docs/remote.md); the repository is "
            "copied there, the image sent if it lacks it, results copied back",
    "on": "run on a cluster: slurm (the profile, cluster.toml, says how; docs/cluster.md)",
    "gpus": "GPU types from the profile, comma-separated (default: every type it names)",
    "cluster": "the cluster profile, a TOML file (default: invoke config kernellab.cluster, $KERNELLAB_CLUSTER, "
               "./cluster.toml)",
    "dry_run": "print the batch scripts (or Kubernetes Jobs) and submit nothing",
    "resume": "an earlier cluster run (results/<run>): submit only its tasks that left no results",
}




@dataclass(frozen=True)
class Flags:
    """The place flags of every run task, as the task received them (one field per flag, help in PLACE_HELP)."""

    native: bool = False
    target: str | None = None
    image: str | None = None
    engine: str | None = None
    gpu_mode: str | None = None
    gpu_index: str | None = None
    host: str | None = None
    on: str | None = None
    gpus: str | None = None
    cluster: str | None = None
    dry_run: bool = False
    resume: str | None = None

    @property
    def on_cluster(self) -> bool:
        return on_cluster(self.on, self.resume)


assert [f.name for f in fields(Flags)] == list(PLACE_HELP), "every place flag has its help, in the same order"
#: No place flag given: a container of the default target on this machine.
DEFAULT = Flags()


class Place(Protocol):
    def run(self, job: Job) -> int: ...


@dataclass(frozen=True)
class Native:
    """This machine, this Python; --gpu-index shows the job only those GPUs (by UUID)."""

    gpu_index: str | None = None

    def run(self, job: Job) -> int:
        if job.mounts:
            raise UsageError(f"`{job.name}` mounts {', '.join(job.mounts)}, which only a container can; run it in one.")
        argv = list(job.with_paths(str))
        if argv[0] == "python":
            argv[0] = sys.executable
        env = {"PYTHONPATH": pythonpath(), **job.env}
        if self.gpu_index is not None:
            env["CUDA_VISIBLE_DEVICES"] = gpu.visible_devices(self.gpu_index)
        if job.scratch is not None:
            env["KERNELLAB_OUT"] = str(job.scratch.resolve())
        if job.output is None:
            return proc.call(argv, cwd=ROOT, env=env)
        with open(job.output, "w") as f:
            return proc.to_file(argv, f, cwd=ROOT, env=env, timeout=job.timeout)


@dataclass(frozen=True)
class Container:
    """A container of `image` on a host (this machine, or another one's engine): the repository at /workspace,
    the caller's UID, the GPU as gpu_mode says."""

    image: str | Image               # a reference, or an Image already inspected (a target's, a recipe's)
    gpu_mode: bool | str = True
    gpu_index: str | None = None
    engine: Engine | None = None
    host: runner.Host = runner.LOCAL

    def run(self, job: Job) -> int:
        try:
            return self._run(job)
        finally:
            self.host.bring_back()   # another machine's results, written or not (Ctrl-C too), come back

    def _run(self, job: Job) -> int:
        host = self.host
        env = dict(job.env)
        # Mounted folders are the host's: another machine's copy of each (sent before, brought back after).
        mounts = [host.mount(m) for m in job.mounts]
        mounts += host.tool_mounts(job.tools)  # the host's installs, found only when the image has none
        if job.scratch is not None:
            mounts.append(f"{host.folder(job.scratch)}:{SCRATCH}")
            env["KERNELLAB_OUT"] = SCRATCH
        argv = list(job.with_paths(in_workspace))
        gpu_mode = self.gpu_mode if job.gpu else False
        gpu_index = self.gpu_index if job.gpu else None   # a job without a GPU (a recipe's input) attaches none
        image = host.image(self.image)
        if job.output is None:
            return runner.run(image, argv, gpu=gpu_mode, interactive=job.interactive, gpu_index=gpu_index,
                              mounts=mounts, env=env or None, engine=self.engine, host=host)
        eng = resolve_engine(self.engine)
        name = runner.new_name()
        timed_out = threading.Event()

        def stop() -> None:  # past its timeout: the container goes, and with it the command
            timed_out.set()
            eng.remove_container(name)

        timer = threading.Timer(job.timeout, stop) if job.timeout else None
        if timer:
            timer.start()
        try:
            with open(job.output, "w") as f:
                code = runner.run(image, argv, gpu=gpu_mode, gpu_index=gpu_index, name=name, out=f,
                                  mounts=mounts, env=env or None, engine=eng, host=host)
        finally:
            if timer:
                timer.cancel()
        return proc.TIMED_OUT if timed_out.is_set() else code


#: Where a container sees a job's scratch folder ($KERNELLAB_OUT).
SCRATCH = "/kl-out"


def in_workspace(path: Path) -> str:
    """A repository path as a container sees it; UsageError for one outside the repository."""
    rel = jobs.in_repository(path)
    return runner.WORKSPACE if rel == "." else f"{runner.WORKSPACE}/{rel}"


@dataclass(frozen=True)
class Cluster:
    """The cluster a profile describes: the job's parts (kernellab.jobs.Part; none: the job itself), each once per GPU
    type, then one report written by the job's merger. The same for every job: the cluster never asks what it is."""

    target: str | None = None
    gpus: str | None = None
    profile: str | None = None
    configured: str | None = None     # invoke config kernellab.cluster
    resume: str | None = None
    dry_run: bool = False
    argv: Sequence[str] = field(default_factory=list)
    image: str | None = None          # an image instead of the target's (a recipe's, built here)

    def run(self, job: Job) -> int:
        if job.interactive:
            raise ClusterUsageError(f"`invoke {job.name}` needs this terminal; it runs here (--native) or in a container, "
                               "not on a cluster.")
        from .cluster import profile as profiles  # not loaded where a job runs (a node, an image's own Python)
        from .cluster import runs

        prof = profiles.load(profiles.find(self.profile, self.configured))
        if self.resume:
            runs.resume(self.resume, prof)
            return 0
        parts = job.parts() if job.parts else [jobs.Part("task-0", cluster_command(job))]
        runs.start(runs.Request(job.name, parts, job.merger, gpus=self.gpus, select=job.select, target=self.target,
                                image=self.image, dry_run=self.dry_run, argv=list(self.argv)), prof)
        return 0


def cluster_command(job: Job) -> tuple[str, ...]:
    """A job as one task per GPU type runs it (from /workspace), writing its results where the task gathers them."""
    line = shlex.join(job.with_paths(jobs.in_repository))
    if job.results and job.results not in job.argv:
        line += f' {job.results} "$KERNELLAB_RESULTS"'
    return ("bash", "-c", line)


def on_cluster(on: str | None, resume: str | None = None) -> bool:
    """Whether --on (or --resume) sends the run to a cluster; ClusterUsageError for a scheduler kernellab does not
    submit to. Every task that takes --on asks here."""
    if on not in (None, "slurm"):
        raise ClusterUsageError(f"--on {on}: kernellab submits to slurm (Kubernetes users: `scheduler = "
                                "\"kubernetes\"` in the profile and --dry-run).")
    return bool(on or resume)


def choose(c: Any, flags: Flags, image: Image | None = None) -> Place:
    """The place the flags name (a test's own place when invoke's config has `kernellab.place`); image: the one to
    run in instead of a target's (a recipe's own)."""
    config = c.config.get("kernellab", {})
    if config.get("place") is not None:
        return config["place"]
    target = flags.target or config.get("target")
    if flags.on_cluster:
        if flags.native or flags.image or flags.host:
            wrong = ("native is for this machine" if flags.native else "host is another machine's Docker engine"
                     if flags.host else "image is for this machine")
            raise UsageError(f"--{wrong}; a cluster run uses the target's image (--target), converted for the "
                             "cluster's runtime.")
        return Cluster(target=target, gpus=flags.gpus, profile=flags.cluster, configured=config.get("cluster"),
                       resume=flags.resume, dry_run=flags.dry_run, argv=list(sys.argv),
                       image=image.ref if image is not None else None)
    if flags.gpus or flags.cluster or flags.dry_run:
        raise UsageError("--gpus, --cluster and --dry-run are for cluster runs; add --on slurm.")
    if flags.native:
        if flags.image or flags.gpu_mode or flags.host:
            wrong = "image" if flags.image else "gpu-mode" if flags.gpu_mode else "host"
            raise UsageError(f"--{wrong} is for a container; --native runs in this Python, on this machine.")
        return Native(flags.gpu_index)
    from .image import builder

    host = hosted(flags.host)
    has_gpu = bool(host.gpus()) if flags.host and not (image or flags.image or target) else None   # another machine's default target follows its GPUs
    return container(flags, image or flags.image or builder.image_for_target(target, has_gpu=has_gpu), host)


def container(flags: Flags, image: str | Image, host: runner.Host | None = None,
              engine: Engine | None = None) -> Container:
    """A container of `image` (a target's, a recipe's) where the flags say (--host) with the GPUs they say; engine:
    this machine's (default: the one this process chose)."""
    host = host or hosted(flags.host)
    return Container(image, runner.gpu_choice(flags.gpu_mode), flags.gpu_index, host.engine or engine, host)


def hosted(url: str | None) -> runner.Host:
    """The host --host names (another machine's Docker engine, reached by ssh), else this machine."""
    if not url:
        return runner.LOCAL
    from . import remote

    return remote.at(url)
