"""The cluster profile: how to reach a lab's cluster, as data (cluster.toml, docs/cluster.md).

Found at --cluster, else invoke config `kernellab.cluster`, else $KERNELLAB_CLUSTER, else
cluster.toml at the repository's root. Everything a site varies (partition, account, how a GPU type
is asked for, the runtime on the nodes, the shared folder) lives here, never in code.
"""
from __future__ import annotations

import os
import re
import shlex
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import ROOT
from ..errors import ClusterUsageError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python < 3.11
    import tomli as tomllib

SCHEDULERS = ("slurm", "kubernetes")
RUNTIMES = ("docker", "podman", "charliecloud", "apptainer", "enroot", "none")
_KEYS = {"scheduler", "runtime", "shared", "partition", "account", "qos", "time", "throttle", "modules",
         "sbatch", "gpu_mode", "python", "gpu_types", "charliecloud_format", "kubernetes", "load_images"}
_GPU_TYPE = re.compile(r"^[a-z][a-z0-9_-]*$")
_TIME = re.compile(r"^(\d+-)?\d+(:\d{1,2}){0,2}$")


@dataclass(frozen=True)
class Profile:
    """One cluster, as cluster.toml describes it."""

    path: Path
    shared: Path                      # a folder every node sees at the same path
    gpu_types: dict[str, list[str]]   # type -> the sbatch options that ask for one GPU of it
    scheduler: str = "slurm"
    runtime: str = "docker"
    partition: str = ""
    account: str = ""
    qos: str = ""
    time: str = "01:00:00"
    throttle: int = 0                 # at most N tasks of an array at once (sbatch --array=...%N); 0: no limit
    modules: list[str] = field(default_factory=list)
    sbatch: list[str] = field(default_factory=list)   # more #SBATCH lines, verbatim
    gpu_mode: str = ""                # docker/podman: nvidia, cdi, devices, none; "": the best the node has
    python: str = "python3"           # the nodes' Python, which runs kernellab's task runner
    charliecloud_format: str = "dir"  # dir (works unprivileged) or squash (needs FUSE)
    load_images: bool = True          # docker/podman: ship a bundle that nodes lacking the image load; False: they have it
    kubernetes: dict[str, Any] = field(default_factory=dict)  # namespace, image, gpu_resource

    def gpu_options(self, gpu_type: str) -> list[str]:
        """The sbatch options that request one GPU of gpu_type; a type the profile lacks is one sentence."""
        if gpu_type not in self.gpu_types:
            raise ClusterUsageError(f"GPU type `{gpu_type}` is not in {self.path}; it knows "
                               f"{', '.join(sorted(self.gpu_types))}; add `{gpu_type} = \"--gres=gpu:{gpu_type}:1\"` "
                               "under [gpu_types].")
        return self.gpu_types[gpu_type]

    def choose_gpus(self, gpus: str | None) -> list[str]:
        """--gpus h100,a100 checked against the profile (default: every GPU type it names)."""
        chosen = [g.strip().lower() for g in gpus.split(",") if g.strip()] if gpus else sorted(self.gpu_types)
        if not chosen:
            raise ClusterUsageError("--gpus is empty; name GPU types from the profile, e.g. --gpus h100,a100.")
        for g in chosen:
            self.gpu_options(g)
        return list(dict.fromkeys(chosen))


def find(explicit: str | os.PathLike | None = None, configured: str | None = None) -> Path:
    """Where the profile is: --cluster, invoke config, $KERNELLAB_CLUSTER, else ./cluster.toml."""
    for candidate in (explicit, configured, os.environ.get("KERNELLAB_CLUSTER")):
        if candidate:
            path = Path(candidate).expanduser()
            if not path.is_file():
                raise ClusterUsageError(f"cluster profile {path} does not exist; write one (docs/cluster.md shows "
                                   "an example) or point --cluster at yours.")
            return path
    path = ROOT / "cluster.toml"
    if not path.is_file():
        raise ClusterUsageError("no cluster profile: write cluster.toml at the repository's root (docs/cluster.md "
                           "shows one), or pass --cluster PATH or set KERNELLAB_CLUSTER.")
    return path


def load(path: str | os.PathLike) -> Profile:
    """Read and check a profile; every mistake is one sentence naming the file and the key."""
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as e:
        raise ClusterUsageError(f"cannot read the cluster profile {path}: {e}.") from None
    where = f"in {path}"
    unknown = sorted(set(data) - _KEYS)
    if unknown:
        raise ClusterUsageError(f"unknown key(s) {', '.join(unknown)} {where}; the keys are {', '.join(sorted(_KEYS))}.")
    scheduler = _str(data, "scheduler", "slurm", where)
    if scheduler not in SCHEDULERS:
        raise ClusterUsageError(f"scheduler = {scheduler!r} {where}; kernellab drives {' or '.join(SCHEDULERS)}.")
    runtime = _str(data, "runtime", "docker", where)
    if runtime not in RUNTIMES:
        raise ClusterUsageError(f"runtime = {runtime!r} {where}; use one of {', '.join(RUNTIMES)}.")
    if "shared" not in data:
        raise ClusterUsageError(f"`shared` is missing {where}: name a folder every node sees at the same path "
                           "(images and results go there).")
    shared = Path(_str(data, "shared", "", where)).expanduser()
    if not shared.is_absolute():
        shared = (path.parent / shared).resolve()
    types = data.get("gpu_types")
    if not isinstance(types, dict) or not types:
        raise ClusterUsageError(f"[gpu_types] is missing or empty {where}; add one line per GPU type, "
                           "e.g. h100 = \"--gres=gpu:h100:1\".")
    gpu_types: dict[str, list[str]] = {}
    for name, value in types.items():
        if not _GPU_TYPE.match(name):
            raise ClusterUsageError(f"GPU type {name!r} {where} is not a plain lower-case name (h100, a100, l40s).")
        if isinstance(value, str):
            options = shlex.split(value)
        elif isinstance(value, list) and all(isinstance(v, str) for v in value):
            options = list(value)
        else:
            raise ClusterUsageError(f"gpu_types.{name} {where} must be a string of sbatch options or a list of them.")
        gpu_types[name] = options
    time = _str(data, "time", "01:00:00", where)
    if not _TIME.match(time):
        raise ClusterUsageError(f"time = {time!r} {where} is not a Slurm time limit (minutes, MM:SS, HH:MM:SS or D-HH:MM:SS).")
    throttle = data.get("throttle", 0)
    if isinstance(throttle, bool) or not isinstance(throttle, int) or throttle < 0:  # true is an int too
        raise ClusterUsageError(f"throttle = {throttle!r} {where} must be a whole number of tasks (0: no limit).")
    gpu_mode = _str(data, "gpu_mode", "", where)
    if gpu_mode not in ("", "nvidia", "cdi", "devices", "none"):
        raise ClusterUsageError(f"gpu_mode = {gpu_mode!r} {where}; use nvidia, cdi, devices or none (or leave it out).")
    ch_format = _str(data, "charliecloud_format", "dir", where)
    if ch_format not in ("dir", "squash"):
        raise ClusterUsageError(f"charliecloud_format = {ch_format!r} {where}; use dir or squash.")
    load_images = data.get("load_images", True)
    if not isinstance(load_images, bool):
        raise ClusterUsageError(f"load_images = {load_images!r} {where} must be true or false.")
    sbatch = _strs(data, "sbatch", where)
    moved = [o for o in sbatch if o.split("=")[0].split()[0] in ("--output", "-o", "--chdir", "-D")]
    if moved:  # kernellab reads each task's log and results where it put them
        raise ClusterUsageError(f"sbatch = [{', '.join(repr(o) for o in moved)}] {where}: kernellab sets where a task's "
                           "log goes and where it runs (the run's shared folder); leave those options out.")
    kube = data.get("kubernetes", {})
    if not isinstance(kube, dict):
        raise ClusterUsageError(f"[kubernetes] {where} must be a table.")
    return Profile(path=path, shared=shared, gpu_types=gpu_types, scheduler=scheduler, runtime=runtime,
                   partition=_str(data, "partition", "", where), account=_str(data, "account", "", where),
                   qos=_str(data, "qos", "", where), time=time, throttle=throttle,
                   modules=_strs(data, "modules", where), sbatch=sbatch, gpu_mode=gpu_mode,
                   python=_str(data, "python", "python3", where), charliecloud_format=ch_format, kubernetes=kube,
                   load_images=load_images)


def _str(data: dict[str, Any], key: str, default: str, where: str) -> str:
    value = data.get(key, default)
    if not isinstance(value, str):
        raise ClusterUsageError(f"{key} {where} must be a string, not {value!r}.")
    return value


def _strs(data: dict[str, Any], key: str, where: str) -> list[str]:
    value = data.get(key, [])
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ClusterUsageError(f"{key} {where} must be a list of strings.")
    return list(value)
