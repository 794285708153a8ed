"""How a node starts a task in the image, per container runtime: the command line, its environment.

docker and podman go through kernellab.container.runner (the same run as `invoke test` locally: the
caller's UID, the caches, the GPU in the best mode the node has, only the GPUs Slurm gave). The
HPC runtimes are command lines built here; none of them isolates /dev, so the task's GPUs are the
ones CUDA_VISIBLE_DEVICES (set by Slurm) names, passed on explicitly.
"""
from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Mapping, Sequence

from .. import gpu, proc
from ..errors import KernellabError

WORKSPACE, CACHE = "/workspace", "/cache"
#: Host variables a task's container keeps in the runtimes that start from a clean environment.
KEPT = ("CUDA_VISIBLE_DEVICES", "SLURM_JOB_ID", "SLURM_ARRAY_JOB_ID", "SLURM_ARRAY_TASK_ID", "SLURM_JOB_GPUS",
        "TERM", "USER")
#: The tool each runtime needs on the node, and how to get it.
TOOLS = {
    "docker": ("docker", "install Docker on the node, or choose runtime = \"podman\", \"apptainer\" or "
                         "\"charliecloud\" in the profile"),
    "podman": ("podman", "install Podman on the node (Debian/Ubuntu: podman), or choose another runtime"),
    "charliecloud": ("ch-run", "install Charliecloud on the node (Debian/Ubuntu: charliecloud, or "
                               "`module load charliecloud`)"),
    "apptainer": ("apptainer", "install Apptainer on the node (apptainer.org, or `module load apptainer`)"),
    "enroot": ("srun", "pyxis runs through srun; ask the admins for the pyxis SPANK plugin and enroot"),
}


def container_env(task_env: Mapping[str, str], host: Mapping[str, str]) -> dict[str, str]:
    """What the task sees inside an HPC runtime: kernellab's paths, the task's variables, the GPU selection."""
    env = {"HOME": f"{CACHE}/home", "KERNELLAB_CACHE": CACHE, "PYTHONPATH": f"{WORKSPACE}/src",
           "PIP_CACHE_DIR": f"{CACHE}/pip"}
    env.update({k: host[k] for k in KEPT if host.get(k)})
    env.update(task_env)
    return env


def charliecloud(image: str, argv: Sequence[str], env: Mapping[str, str], workspace: Path, cache: Path,
                 driver: Path | None) -> list[str]:
    """ch-run: the image's own environment (/ch/environment), then ours; repo and cache bound; the driver's
    libraries bound at /usr/local/nvidia when the node has a GPU."""
    binds = ["-b", f"{workspace}:{WORKSPACE}", "-b", f"{cache}:{CACHE}"]
    env = dict(env)
    if driver is not None:
        binds += ["-b", f"{driver}:{gpu.DRIVER_DIR}"]
        env["KERNELLAB_DRIVER_LIBS"] = f"{gpu.DRIVER_DIR}/lib64"
    sets = [f"--set-env={k}={v}" for k, v in env.items()]
    # LD_LIBRARY_PATH gains the driver folder after the image's own value (expanded by ch-run).
    if driver is not None:
        sets.append(f"--set-env=LD_LIBRARY_PATH=$LD_LIBRARY_PATH:{gpu.DRIVER_DIR}/lib64")
    return ["ch-run", "--unset-env=*", "--set-env", *sets, *binds, "--cd", WORKSPACE, image, "--", *argv]


def apptainer(image: str, argv: Sequence[str], env: Mapping[str, str], workspace: Path, cache: Path,
              gpu_present: bool) -> list[str]:
    """apptainer exec: --nv brings the driver (and honours CUDA_VISIBLE_DEVICES), --cleanenv keeps the host's out."""
    # Apptainer refuses HOME through --env; --home sets it (and mounts it) the supported way.
    home = env.get("HOME", f"{CACHE}/home")
    return ["apptainer", "exec", *(["--nv"] if gpu_present else []), "--cleanenv",
            "--home", f"{cache / Path(home).relative_to(CACHE)}:{home}" if home.startswith(CACHE) else home,
            "--bind", f"{workspace}:{WORKSPACE},{cache}:{CACHE}", "--pwd", WORKSPACE,
            *[f"--env={k}={v}" for k, v in env.items() if k != "HOME"], image, *argv]


def enroot(image: str, argv: Sequence[str], workspace: Path, cache: Path) -> list[str]:
    """A job step through pyxis: the squashfs as the container image; variables travel in srun's environment."""
    return ["srun", "--ntasks=1", f"--container-image={image}",
            f"--container-mounts={workspace}:{WORKSPACE},{cache}:{CACHE}", f"--container-workdir={WORKSPACE}",
            "--no-container-mount-home", *argv]


def native(argv: Sequence[str], python: str) -> list[str]:
    """Runtime none: the task's command in the node's own Python."""
    return [python, *argv[1:]] if argv and argv[0] == "python" else list(argv)


def driver_folder(stage: Path) -> Path | None:
    """A folder with the host's driver libraries under lib64/ (and nvidia-smi under bin/), to bind into images.

    Hosts that keep them in /usr/local/nvidia (the GPU test machine, many clusters) give that folder;
    otherwise the libraries ldconfig knows are copied once into stage (a bind needs a folder, and the
    system's library folder would bring the host's glibc into the image). None without a GPU.
    """
    if not gpu.device_nodes():
        return None
    files = gpu.driver_files()
    if files == {str(gpu.DRIVER_DIR): str(gpu.DRIVER_DIR)}:
        return gpu.DRIVER_DIR
    if not files:
        return None
    for src, dst in files.items():
        target = stage / Path(dst).relative_to(gpu.DRIVER_DIR)
        if not target.exists():
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, target)
    return stage


def missing_tool(runtime: str) -> str | None:
    """One sentence when the node lacks the runtime's tool, else None."""
    if runtime not in TOOLS:
        return None
    tool, how = TOOLS[runtime]
    node = os.uname().nodename
    if not shutil.which(tool):
        return f"runtime {runtime} is not available on node {node}: `{tool}` is not on PATH; {how}."
    if runtime == "enroot":
        options = _srun_help()
        if options is None:
            return f"runtime enroot cannot start on node {node}: `srun --help` failed there; {how}."
        if "--container-image" not in options:
            return (f"runtime enroot is not available on node {node}: srun has no --container-image (pyxis is not "
                    f"loaded); {how}.")
    return None


def _srun_help() -> str | None:
    """srun's option list, which the pyxis plugin extends with --container-image; None if srun fails."""
    try:
        r = proc.run(["srun", "--help"], check=False, timeout=30)
    except KernellabError:
        return None
    return r.stdout + r.stderr if r.ok else None
