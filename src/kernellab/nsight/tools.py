"""NVIDIA's tools, one registry: Nsight Compute (`ncu`), `compute-sanitizer` and Nsight Systems (`nsys`): where each
is, what a container mounts when its image has none, and whether this machine lets a user read the GPU's counters.

A tool is one `Tool` row in TOOLS (its override variable, the usual install folders, where a container sees the
host's install) and one module of its own (ncu, sanitize, nsys). Search order: the override ($KERNELLAB_NCU,
$KERNELLAB_SANITIZER, $KERNELLAB_NSYS), PATH, $CUDA_HOME/bin, the usual install folders (newest version first), and
last the host's install that a place mounts read-only into a container whose image has none (`Tool.mount`).
Counters: the driver's `RmProfilingAdminOnly` in /proc/driver/nvidia/params; 1 means only root (or CAP_SYS_ADMIN)
may read them.
"""
from __future__ import annotations

import glob
import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

from .. import proc
from ..errors import KernellabError
from ..image.targets import vkey


@dataclass(frozen=True)
class Tool:
    """One of NVIDIA's tools: its executable's name, override variable, install folders (globs, newest first), and
    the folder where a container sees the host's install (mounted read-only; searched last)."""

    name: str
    override: str
    folders: tuple[str, ...]
    mount: str
    doc: str                     # the page that says how kernellab uses it
    doctor: str = ""             # the name of its line in `invoke doctor` ("": none)
    module: str = ""             # its module, whose readiness(exe, has_gpu) -> Readiness doctor calls

    def mounted(self, install: Path) -> str:
        """The `host:container:ro` mount that shows the host's install (see install_folder) in a container."""
        return f"{install}:{self.mount}:ro"


#: Where a container sees the host's Nsight Compute folder and Nsight Systems prefix.
HOST_NCU = "/opt/kernellab/host-nsight-compute"
HOST_NSYS = "/opt/kernellab/host-nsight-systems"
PARAMS = Path("/proc/driver/nvidia/params")

TOOLS = {t.name: t for t in (
    Tool("ncu", "KERNELLAB_NCU", ("/opt/nvidia/nsight-compute/*/ncu", "/usr/local/cuda*/nsight-compute*/ncu",
                                  "/usr/local/NVIDIA-Nsight-Compute*/ncu", f"{HOST_NCU}/ncu"), HOST_NCU, "docs/profile.md",
         "profiling", "kernellab.nsight.ncu"),
    Tool("compute-sanitizer", "KERNELLAB_SANITIZER",
         ("/usr/local/cuda*/compute-sanitizer/compute-sanitizer", "/usr/local/cuda*/bin/compute-sanitizer",
          "/opt/nvidia/compute-sanitizer/compute-sanitizer"), "", "docs/profile.md"),
    # Standalone installs and kernellab's prefix (docker/nsight-systems.sh) have bin/nsys; the one inside an Nsight
    # Compute folder (and CUDA's) sits in .../target-linux-x64/.
    Tool("nsys", "KERNELLAB_NSYS", ("/opt/nvidia/nsight-systems/*/bin/nsys", "/opt/nvidia/nsight-systems-cli/*/bin/nsys",
                                    "/usr/local/cuda*/bin/nsys", "/opt/nvidia/nsight-compute/*/host/target-linux-x64/nsys",
                                    f"{HOST_NSYS}/bin/nsys", f"{HOST_NSYS}/target-linux-x64/nsys"),
         HOST_NSYS, "docs/profile.md#timelines-nsight-systems", "timelines", "kernellab.nsight.nsys"),
)}
#: What to do when the counters are restricted, in one sentence (doctor and `invoke profile` say it).
COUNTERS_REMEDY = (
    "GPU performance counters are restricted to admin users on this machine (RmProfilingAdminOnly: 1); "
    "as root on the host, write `options nvidia NVreg_RestrictProfilingToAdminUsers=0` to "
    "/etc/modprobe.d/nvidia-profiling.conf and reload the nvidia module (or reboot), or use "
    "`invoke profile --trace`, which needs no counters."
)


def find(tool: str) -> Path | None:
    """The executable of a tool of TOOLS to use here, or None."""
    override = os.environ.get(TOOLS[tool].override, "").strip()
    if override:
        return Path(override) if os.access(override, os.X_OK) else None
    on_path = shutil.which(tool)
    if on_path:
        return Path(on_path)
    home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH")
    if home and os.access(Path(home) / "bin" / tool, os.X_OK):
        return Path(home) / "bin" / tool
    for pattern in TOOLS[tool].folders:
        found = sorted(glob.glob(pattern), key=_version_of, reverse=True)
        for candidate in found:
            if os.access(candidate, os.X_OK):
                return Path(candidate)
    return None


def version(exe: Path, pattern: str) -> str | None:
    """A tool's version: `pattern`'s first group in what `exe --version` prints, or None when it does not start."""
    try:
        text = proc.run([str(exe), "--version"], check=False, timeout=60).stdout
    except KernellabError:
        return None
    m = re.search(pattern, text)
    return m.group(1) if m else None


def _version_of(path: str) -> tuple[int, ...]:
    numbers = re.findall(r"\d+(?:\.\d+)+", path)
    return vkey(numbers[-1]) if numbers else ()


def install_folder(exe: Path) -> Path:
    """The folder that holds a tool's install (what a container gets mounted): ncu's own folder (ncu may be a link,
    /usr/local/cuda/bin/ncu, into it); for nsys, the folder above its bin/ or target-linux-x64/ (which holds the
    report importer's folder beside the CLI's)."""
    real = exe.resolve()
    if real.name == "nsys" and real.parent.name in ("bin", "target-linux-x64"):
        return real.parent.parent
    return real.parent


def mounts(names: tuple[str, ...]) -> list[str]:
    """The read-only mounts of this machine's installs of the tools `names` (those with a mount point), for a
    container whose image may lack them."""
    out = []
    for name in names:
        tool, host = TOOLS[name], find(name)
        if tool.mount and host is not None:
            out.append(tool.mounted(install_folder(host)))
    return out


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
