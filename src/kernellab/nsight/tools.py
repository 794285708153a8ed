"""NVIDIA's kernel tools, Nsight Compute (`ncu`) and `compute-sanitizer`: where they are, and whether this
machine lets a user read the GPU's performance counters.

Search order for a tool: $KERNELLAB_NCU / $KERNELLAB_SANITIZER, PATH, $CUDA_HOME/bin, the usual install
folders (newest version first), and last the host's Nsight Compute that `invoke profile` mounts read-only
into a container whose image has none (HOST_NCU). Counters: the driver's `RmProfilingAdminOnly` in
/proc/driver/nvidia/params; 1 means only root (or CAP_SYS_ADMIN) may read them.
"""
from __future__ import annotations

import glob
import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

from ..image.targets import vkey

#: Where a container sees the host's Nsight Compute folder (mounted read-only by `invoke profile`).
HOST_NCU = "/opt/kernellab/host-nsight-compute"
PARAMS = Path("/proc/driver/nvidia/params")

_OVERRIDE = {"ncu": "KERNELLAB_NCU", "compute-sanitizer": "KERNELLAB_SANITIZER"}
_FOLDERS = {
    "ncu": ["/opt/nvidia/nsight-compute/*/ncu", "/usr/local/cuda*/nsight-compute*/ncu", "/usr/local/NVIDIA-Nsight-Compute*/ncu",
            f"{HOST_NCU}/ncu"],
    "compute-sanitizer": ["/usr/local/cuda*/compute-sanitizer/compute-sanitizer", "/usr/local/cuda*/bin/compute-sanitizer",
                          "/opt/nvidia/compute-sanitizer/compute-sanitizer"],
}

#: What to do when the counters are restricted, in one sentence (doctor and `invoke profile` say it).
COUNTERS_REMEDY = (
    "GPU performance counters are restricted to admin users on this machine (RmProfilingAdminOnly: 1); "
    "as root on the host, write `options nvidia NVreg_RestrictProfilingToAdminUsers=0` to "
    "/etc/modprobe.d/nvidia-profiling.conf and reload the nvidia module (or reboot), or use "
    "`invoke profile --trace`, which needs no counters."
)


def find(tool: str) -> Path | None:
    """The `ncu` or `compute-sanitizer` executable to use here, or None."""
    override = os.environ.get(_OVERRIDE[tool], "").strip()
    if override:
        return Path(override) if os.access(override, os.X_OK) else None
    on_path = shutil.which(tool)
    if on_path:
        return Path(on_path)
    home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH")
    if home and os.access(Path(home) / "bin" / tool, os.X_OK):
        return Path(home) / "bin" / tool
    for pattern in _FOLDERS[tool]:
        found = sorted(glob.glob(pattern), key=_version_of, reverse=True)
        for candidate in found:
            if os.access(candidate, os.X_OK):
                return Path(candidate)
    return None


def _version_of(path: str) -> tuple[int, ...]:
    numbers = re.findall(r"\d+(?:\.\d+)+", path)
    return vkey(numbers[-1]) if numbers else ()


def install_folder(ncu: Path) -> Path:
    """The folder that holds an Nsight Compute install (what a container gets mounted): ncu's own folder,
    unless ncu is a link (/usr/local/cuda/bin/ncu) into one."""
    return ncu.resolve().parent


def counters_restricted(params_text: str | None) -> bool | None:
    """From /proc/driver/nvidia/params: True when only admins may read counters, None when unknown."""
    if not params_text:
        return None
    m = re.search(r"^RmProfilingAdminOnly:\s*(\d+)", params_text, re.MULTILINE)
    return None if m is None else m.group(1) != "0"


def read_params(path: Path = PARAMS) -> str | None:
    try:
        return path.read_text()
    except OSError:
        return None


@dataclass(frozen=True)
class Readiness:
    """Whether `invoke profile` can work here: severity ok/warn/info, a message and a remedy."""

    severity: str
    message: str
    remedy: str = ""


def readiness(ncu: Path | None, params_text: str | None, uid: int, has_gpu: bool) -> Readiness:
    """What doctor says about profiling, from ncu's place, the driver's params, the user and the GPU."""
    if not has_gpu:
        return Readiness("info", "no NVIDIA GPU here: nothing to profile")
    where = f"ncu at {ncu}" if ncu else "no ncu on this machine (an image's own is used when it has one)"
    restricted = counters_restricted(params_text)
    if restricted and uid != 0:
        return Readiness("warn", f"{where}; counters restricted to admins (RmProfilingAdminOnly: 1)", COUNTERS_REMEDY)
    counters = {True: "counters restricted to admins, but this is root", False: "counters open to all users "
                "(RmProfilingAdminOnly: 0)", None: "counter access unknown (no /proc/driver/nvidia/params)"}[restricted]
    if ncu is None:
        return Readiness("warn", f"{where}; {counters}",
                         "install Nsight Compute (https://developer.nvidia.com/nsight-compute) or a CUDA toolkit "
                         "that ships it, or profile in an image that has it; `invoke profile --trace` needs none")
    return Readiness("ok", f"{where}; {counters}")
