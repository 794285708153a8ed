"""Facts about this machine's NVIDIA GPUs and how a container can reach them."""
from __future__ import annotations

import glob
import os
import re
import shutil
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from . import proc
from .engine import Engine, EngineInfo
from .errors import KernellabError

#: Driver libraries a CUDA program (and nvidia-smi / NVML) needs from the host.
DRIVER_LIBS = ("libcuda.so", "libnvidia-ml.so", "libnvidia-ptxjitcompiler.so", "libnvidia-nvvm.so",
               "libnvidia-gpucomp.so", "libcudadebugger.so", "libnvidia-allocator.so", "libnvidia-cfg.so")
#: Where some hosts (and the GPU test machine) keep the driver's user-space files.
DRIVER_DIR = Path("/usr/local/nvidia")
MODES = ("nvidia", "cdi", "devices")


@dataclass(frozen=True)
class HostGpu:
    index: int
    name: str
    uuid: str
    compute_capability: str
    driver: str
    memory_mib: int

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def nvidia_smi() -> str | None:
    found = shutil.which("nvidia-smi")
    if found:
        return found
    candidate = DRIVER_DIR / "bin" / "nvidia-smi"
    return str(candidate) if candidate.exists() else None


def host_gpus() -> list[HostGpu]:
    """The GPUs nvidia-smi reports; [] when there is no driver or no GPU."""
    smi = nvidia_smi()
    if smi is None:
        return []
    try:
        r = proc.run([smi, "--query-gpu=index,name,uuid,compute_cap,driver_version,memory.total",
                      "--format=csv,noheader,nounits"], check=False, timeout=60)
    except KernellabError:  # hung driver: treat as no GPU, doctor says so
        return []
    if not r.ok:
        return []
    gpus = []
    for line in r.stdout.strip().splitlines():
        f = [x.strip() for x in line.split(",")]
        if len(f) < 6:
            continue
        mem = int(float(f[5])) if re.match(r"^[\d.]+$", f[5]) else 0
        gpus.append(HostGpu(int(f[0]), f[1], f[2], f[3], f[4], mem))
    return gpus


def device_nodes() -> list[str]:
    """/dev/nvidia* nodes a container needs for GPU access (GPUs, control, UVM)."""
    nodes = sorted(glob.glob("/dev/nvidia[0-9]*"), key=lambda s: int(re.sub(r"\D", "", s) or 0))
    for extra in ("/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools", "/dev/nvidia-modeset"):
        if os.path.exists(extra):
            nodes.append(extra)
    return nodes


def driver_files() -> dict[str, str]:
    """Host driver files to mount into a container: {host path: container path}.

    A host with /usr/local/nvidia/lib64 (the GPU test machine, many clusters) mounts that folder;
    otherwise each driver library ldconfig knows is mounted under /usr/local/nvidia/lib64.
    """
    if (DRIVER_DIR / "lib64").is_dir() and list((DRIVER_DIR / "lib64").glob("libcuda.so*")):
        return {str(DRIVER_DIR): str(DRIVER_DIR)}
    files: dict[str, str] = {}
    ldconfig = shutil.which("ldconfig") or "/sbin/ldconfig"
    text = proc.run([ldconfig, "-p"], check=False, timeout=30).stdout if os.path.exists(ldconfig) else ""
    for line in text.splitlines():
        m = re.match(r"\s*(\S+) \(([^)]*)\) => (\S+)", line)
        if not m or "x86-64" not in m.group(2) and "64bit" not in m.group(2) and "AArch64" not in m.group(2):
            continue
        name, path = m.group(1), m.group(3)
        if any(name.startswith(lib) for lib in DRIVER_LIBS) and os.path.exists(path):
            files[os.path.realpath(path)] = f"{DRIVER_DIR}/lib64/{name}"
    smi = nvidia_smi()
    if smi and files:
        files[os.path.realpath(smi)] = f"{DRIVER_DIR}/bin/nvidia-smi"
    return files


def available_modes(info: EngineInfo | None, engine_modes: tuple[str, ...] = MODES) -> list[str]:
    """GPU modes that can work here with an engine, best first: nvidia runtime, CDI, device nodes + libraries."""
    modes = []
    if info is not None and "nvidia" in info.runtimes:
        modes.append("nvidia")
    cdi_dirs = info.cdi_dirs if info is not None else ()
    if cdi_dirs and any(glob.glob(f"{d}/*nvidia*") for d in cdi_dirs):
        modes.append("cdi")
    if device_nodes() and any("libcuda.so" in c for c in driver_files().values()) or \
            (device_nodes() and DRIVER_DIR.is_dir()):
        modes.append("devices")
    return [m for m in modes if m in engine_modes]


def container_gpu_args(engine: Engine, mode: str, gpus: str = "all") -> tuple[list[str], dict[str, str]]:
    """The engine's `run` flags and environment that attach the GPUs in mode."""
    if mode not in MODES:
        raise ValueError(f"unknown GPU mode {mode!r}; use one of {', '.join(MODES)}")
    devices = mode == "devices"
    args, env = engine.gpu_args(mode, driver_files() if devices else {}, device_nodes() if devices else (), gpus)
    if devices:
        # Appended to the image's own values by kernellab.containers.
        env = {**env, "LD_LIBRARY_PATH": f"{DRIVER_DIR}/lib64:{DRIVER_DIR}/lib", "PATH": f"{DRIVER_DIR}/bin"}
    return args, env
