"""Facts about this machine's NVIDIA GPUs and how a container can reach them."""
from __future__ import annotations

import glob
import os
import re
import shutil
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from . import proc
from .engine import Engine, EngineInfo
from .errors import KernellabError, UsageError

#: Driver libraries a CUDA program (and nvidia-smi / NVML) needs from the host.
DRIVER_LIBS = ("libcuda.so", "libnvidia-ml.so", "libnvidia-ptxjitcompiler.so", "libnvidia-nvvm.so",
               "libnvidia-gpucomp.so", "libcudadebugger.so", "libnvidia-allocator.so", "libnvidia-cfg.so")
#: Where some hosts (and the GPU test machine) keep the driver's user-space files.
DRIVER_DIR = Path("/usr/local/nvidia")
MODES = ("nvidia", "cdi", "devices")
#: Device nodes every GPU container needs besides the GPUs' own /dev/nvidia<N>.
CONTROL_NODES = ("/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools", "/dev/nvidia-modeset")
#: Where a run's GPUs are chosen when --gpu-index is not given, first found wins: a Slurm step's or job's
#: GPUs (host indices even where the job's cgroup renumbers CUDA's view), then CUDA_VISIBLE_DEVICES.
SELECTION_VARS = ("SLURM_STEP_GPUS", "SLURM_JOB_GPUS", "CUDA_VISIBLE_DEVICES")
#: Whole CUDA_VISIBLE_DEVICES values that hide every GPU (Slurm sets NoDevFiles for a job without GPUs).
NO_GPU_VALUES = ("", "-1", "NoDevFiles")


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


#: nvidia-smi's arguments for the facts HostGpu holds (this machine's, or a server's through ssh).
QUERY = "--query-gpu=index,name,uuid,compute_cap,driver_version,memory.total --format=csv,noheader,nounits"


def host_gpus() -> list[HostGpu]:
    """The GPUs nvidia-smi reports; [] when there is no driver or no GPU."""
    smi = nvidia_smi()
    if smi is None:
        return []
    try:
        r = proc.run([smi, *QUERY.split()], check=False, timeout=60)
    except KernellabError:  # hung driver: treat as no GPU, doctor says so
        return []
    return parse_gpus(r.stdout) if r.ok else []


def parse_gpus(text: str) -> list[HostGpu]:
    """nvidia-smi's answer to QUERY as HostGpus."""
    gpus = []
    for line in text.strip().splitlines():
        f = [x.strip() for x in line.split(",")]
        if len(f) < 6:
            continue
        mem = int(float(f[5])) if re.match(r"^[\d.]+$", f[5]) else 0
        gpus.append(HostGpu(int(f[0]), f[1], f[2], f[3], f[4], mem))
    return gpus


def device_nodes() -> list[str]:
    """/dev/nvidia* nodes a container needs for GPU access (GPUs, control, UVM)."""
    nodes = sorted(glob.glob("/dev/nvidia[0-9]*"), key=lambda s: int(re.sub(r"\D", "", s) or 0))
    for extra in CONTROL_NODES:
        if os.path.exists(extra):
            nodes.append(extra)
    return nodes


def select_nodes(nodes: Sequence[str], gpus: Sequence[str] | None) -> list[str]:
    """Of device_nodes(), the selected GPUs' /dev/nvidia<N> and every control node (all of them for None).

    A GPU's node is numbered by its minor number, which is nvidia-smi's index wherever the driver
    numbers GPUs in PCI order (the usual case); a selected GPU without its node is an error, never a
    container that silently has no GPU.
    """
    if gpus is None:
        return list(nodes)
    missing = [f"/dev/nvidia{g}" for g in gpus if f"/dev/nvidia{g}" not in nodes]
    if missing:
        raise KernellabError(f"this machine has no {', '.join(missing)} for the GPUs selected ({', '.join(gpus)}); "
                             f"use `--gpu-mode nvidia` or `cdi`, or pick GPUs by `ls /dev/nvidia*`.")
    keep = {f"/dev/nvidia{g}" for g in gpus}
    return [n for n in nodes if n in keep or not re.fullmatch(r"/dev/nvidia\d+", n)]


def selection_source(explicit: str | int | None = None, environ: Mapping[str, str] = os.environ
                     ) -> tuple[str, str] | None:
    """Where a run's GPU selection comes from and its raw value: --gpu-index, Slurm, CUDA_VISIBLE_DEVICES, or None."""
    if explicit is not None:
        return "--gpu-index", str(explicit)
    for name in SELECTION_VARS:
        # An empty Slurm variable says nothing; an empty CUDA_VISIBLE_DEVICES hides every GPU.
        if name in environ and (environ[name].strip() or name == "CUDA_VISIBLE_DEVICES"):
            return name, environ[name]
    return None


def selected_gpus(explicit: str | int | None = None, environ: Mapping[str, str] = os.environ,
                  gpus: Sequence[HostGpu] | None = None) -> list[str] | None:
    """The host GPU indices (nvidia-smi's, as strings, ascending) a run may use; None for all of them.

    explicit is --gpu-index ("1" or "0,2"); without it SLURM_STEP_GPUS, SLURM_JOB_GPUS, then
    CUDA_VISIBLE_DEVICES (indices, or GPU UUIDs and their unique `GPU-` prefixes) decide. [] means no
    GPU (CUDA_VISIBLE_DEVICES hides them all). gpus is the host's list (default: host_gpus(), read
    only when there is a selection to check). An index or UUID the host does not have is an error.
    """
    source = selection_source(explicit, environ)
    if source is None:
        return None
    name, value = source
    value = value.strip()
    if name == "CUDA_VISIBLE_DEVICES" and value in NO_GPU_VALUES:
        return []
    host = list(host_gpus() if gpus is None else gpus)
    said = f"--gpu-index {value or repr(value)}" if name == "--gpu-index" else f"{name}={value}"
    fix = "" if name == "--gpu-index" else f", or unset {name}"
    chosen = {_match_gpu(item.strip(), host, said, fix) for item in value.split(",")}
    # Ascending, whatever the order asked: a container's CUDA numbers its GPUs in the driver's order
    # in every mode, so an order could not be kept anyway.
    return [str(i) for i in sorted(chosen)]


def _match_gpu(item: str, host: Sequence[HostGpu], said: str, fix: str) -> int:
    """The host index of one entry of a selection: an index, a GPU UUID or a unique `GPU-` prefix of one."""
    have = ", ".join(f"{g.index} ({g.name}, {g.uuid})" for g in host) or "none that nvidia-smi can see"
    if item.startswith("MIG-"):
        raise UsageError(f"{said} names a MIG instance ({item}), and kernellab attaches whole GPUs; give the "
                             f"parent GPU's index with --gpu-index (this machine's GPUs: {have}).")
    if item.isdigit():
        found = [g for g in host if g.index == int(item)]
    elif item.upper().startswith("GPU-"):
        found = [g for g in host if g.uuid.lower().startswith(item.lower())]
    else:
        found = []
    if len(found) != 1:
        what = "more than one GPU" if found else f"GPU {item!r}, which this machine does not have"
        raise UsageError(f"{said} names {what}; give an index or UUID of one of this machine's GPUs "
                             f"(--gpu-index N){fix}; its GPUs: {have}.")
    return found[0].index


def visible_devices(explicit: str | int, gpus: Sequence[HostGpu] | None = None) -> str:
    """CUDA_VISIBLE_DEVICES that shows a native process only the host GPUs --gpu-index names: their UUIDs.

    UUIDs, not indices: CUDA numbers GPUs fastest first unless CUDA_DEVICE_ORDER=PCI_BUS_ID, so its
    GPU N need not be nvidia-smi's GPU N; a UUID is that GPU in either order.
    """
    host = list(host_gpus() if gpus is None else gpus)
    uuids = {str(g.index): g.uuid for g in host}
    return ",".join(uuids[i] for i in selected_gpus(explicit, {}, host) or [])


def driver_files() -> dict[str, str]:
    """Host driver files to mount into a container: {host path: container path}.

    A host with /usr/local/nvidia/lib64 (the GPU test machine, many clusters) mounts that folder;
    otherwise each driver library ldconfig knows is mounted under /usr/local/nvidia/lib64.
    """
    if (DRIVER_DIR / "lib64").is_dir() and list((DRIVER_DIR / "lib64").glob("libcuda.so*")):
        return {str(DRIVER_DIR): str(DRIVER_DIR)}
    ldconfig = shutil.which("ldconfig") or "/sbin/ldconfig"
    text = proc.run([ldconfig, "-p"], check=False, timeout=30).stdout if os.path.exists(ldconfig) else ""
    files = {os.path.realpath(path): inside for path, inside in driver_libraries(text).items() if os.path.exists(path)}
    smi = nvidia_smi()
    if smi and files:
        files[os.path.realpath(smi)] = f"{DRIVER_DIR}/bin/nvidia-smi"
    return files


def driver_libraries(ldconfig_p: str) -> dict[str, str]:
    """The driver's libraries in `ldconfig -p`'s listing (this machine's, or a server's): {path: container path}."""
    files: dict[str, str] = {}
    for line in ldconfig_p.splitlines():
        m = re.match(r"\s*(\S+) \(([^)]*)\) => (\S+)", line)
        if not m or "x86-64" not in m.group(2) and "64bit" not in m.group(2) and "AArch64" not in m.group(2):
            continue
        name, path = m.group(1), m.group(3)
        if any(name.startswith(lib) for lib in DRIVER_LIBS):
            files[path] = f"{DRIVER_DIR}/lib64/{name}"
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


def container_gpu_args(engine: Engine, mode: str, gpus: Sequence[str] | None = None,
                       driver: Callable[[], tuple[list[str], dict[str, str]]] | None = None
                       ) -> tuple[list[str], dict[str, str]]:
    """The engine's `run` flags and environment that attach the GPUs in mode: host indices gpus, or all for None.
    driver: the host's device nodes and driver files, for devices mode (default: this machine's)."""
    if mode not in MODES:
        raise ValueError(f"unknown GPU mode {mode!r}; use one of {', '.join(MODES)}")
    devices = mode == "devices"
    all_nodes, files = (driver or (lambda: (device_nodes(), driver_files())))() if devices else ([], {})
    nodes = select_nodes(all_nodes, gpus) if devices else []
    args, env = engine.gpu_args(mode, files, nodes, gpus)
    if devices:
        # Appended to the image's own values by kernellab.container.runner.
        env = {**env, "LD_LIBRARY_PATH": f"{DRIVER_DIR}/lib64:{DRIVER_DIR}/lib", "PATH": f"{DRIVER_DIR}/bin"}
    if gpus is not None:
        # Inside, CUDA sees only the GPUs attached and numbers them 0..k-1 in every mode (the runtime
        # and CDI hide the rest; devices mode has no node for them), so 0..k-1 names exactly those.
        # Set rather than left unset: it overrides a CUDA_VISIBLE_DEVICES the image sets, and the
        # host's value must never reach in here, where its host numbers mean other GPUs, or none.
        env["CUDA_VISIBLE_DEVICES"] = ",".join(str(i) for i in range(len(gpus)))
        if mode != "nvidia":
            # On a host whose default runtime is nvidia, an image's NVIDIA_VISIBLE_DEVICES=all would
            # have the runtime add every GPU beside the ones these flags attach; void turns that off.
            env["NVIDIA_VISIBLE_DEVICES"] = "void"
    return args, env
