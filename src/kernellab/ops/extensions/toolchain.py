"""The compilers and their settings for an extension build: nvcc and C++ flags, the CUDA architectures to
build for (from $TORCH_CUDA_ARCH_LIST or the visible GPUs, with arch-specific variants such as "9.0a"),
how many compile jobs this machine holds, and which nvcc is used and what options it has. Nothing here
touches a build folder; the folder's key and the build itself read these.
"""
from __future__ import annotations

import functools
import os
import re
from pathlib import Path
from typing import Sequence

from ... import proc
from ...errors import ExtensionError, KernellabError
from ...image.targets import vkey

#: nvcc flags: -lineinfo maps SASS back to source lines (profilers, compute-sanitizer);
#: -Xptxas=-v reports registers and spills per kernel, which `invoke build-kernels` shows.
CUDA_FLAGS = ("-O3", "-lineinfo", "-Xptxas=-v")
#: With nvcc >= 11.2: two of its steps at a time (the host side of a .cu beside its device side, one
#: arch beside another). On the H100 machine a one-file rebuild of vector_add's .cu took 1.27 s with
#: two threads, 1.73 s with one and 1.62 s with one per core (--threads=0), best of 4 each.
PARALLEL_NVCC = ("--threads=2",)
#: Where nvcc has it (12.x): the device optimizer and ptxas over up to this many threads, split by kernel
#: ("minimal, if any, impact on the compiled code", says nvcc). softmax's .cu (15 kernels) went from
#: 2.95 s to 2.12 s on the H100 machine, best of 5; one kernel's file gains little.
SPLIT_COMPILE_THREADS = 4
CXX_FLAGS = ("-O3",)
#: Peak memory of one compile job with torch headers (nvcc or g++), for sizing MAX_JOBS.
GIB_PER_JOB = 1.5


def arch_list() -> str:
    """CUDA architectures to build for: $TORCH_CUDA_ARCH_LIST (set in our images), else the visible GPUs'."""
    env = os.environ.get("TORCH_CUDA_ARCH_LIST", "").strip()
    if env and env != "native":
        return env
    import torch

    if not torch.cuda.is_available():
        raise ExtensionError(
            "cannot choose CUDA architectures: TORCH_CUDA_ARCH_LIST is unset and no GPU is visible; "
            "set it (e.g. TORCH_CUDA_ARCH_LIST=9.0) or build on the GPU machine."
        )
    caps = sorted({torch.cuda.get_device_capability(i) for i in range(torch.cuda.device_count())})
    return ";".join(f"{major}.{minor}" for major, minor in caps)


def max_jobs() -> int:
    """Parallel compile jobs: one per core, fewer when memory would not hold them."""
    cores = _cores()
    available = _mem_available_gib()
    by_memory = int(available // GIB_PER_JOB) if available is not None else cores
    return max(1, min(cores, by_memory))


def _cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def cuda_flags() -> tuple[str, ...]:
    """CUDA_FLAGS, plus PARALLEL_NVCC when torch's CUDA (and so its nvcc) is 11.2 or newer, plus
    --split-compile when this nvcc has it."""
    import torch

    flags = CUDA_FLAGS + (PARALLEL_NVCC if vkey(torch.version.cuda or "0") >= (11, 2) else ())
    threads = min(SPLIT_COMPILE_THREADS, _cores())
    if threads > 1 and "--split-compile" in nvcc_options(_nvcc()):
        flags += (f"--split-compile={threads}",)
    return flags


@functools.cache
def nvcc_options(nvcc: str) -> frozenset[str]:
    """The long options this nvcc lists in its --help (empty when it cannot be run)."""
    try:
        out = proc.run([nvcc, "--help"], check=False, timeout=60).stdout
    except KernellabError:  # not installed, or no answer within the minute
        return frozenset()
    return frozenset(re.findall(r"^(--[a-z][a-z0-9-]*)", out, re.MULTILINE))


def plain_arch_list() -> str:
    """arch_list() without arch-specific suffixes ("9.0a" -> "9.0"): the archs of this build, whatever an
    earlier build of an op with `requires` left in TORCH_CUDA_ARCH_LIST."""
    return re.sub(r"(\d+\.\d+)[af]", r"\1", arch_list())


def with_arch_specific(arch_list: str, arch_specific: Sequence[str]) -> str:
    """A TORCH_CUDA_ARCH_LIST with each arch that one of `arch_specific` ("9.0a", "10.0f") builds on
    replaced by that variant: "8.0;9.0+PTX" with "9.0a" is "8.0;9.0a+PTX", so that op's library holds
    sm_90a code (which runs on compute capability 9.0 only) instead of sm_90."""
    variants = {v[:-1]: v for v in arch_specific}
    out = []
    for entry in filter(None, arch_list.replace(" ", ";").split(";")):
        base = entry.removesuffix("+PTX")
        out.append(variants.get(base, base) + ("+PTX" if entry.endswith("+PTX") else ""))
    return ";".join(out)


def _nvcc() -> str:
    from torch.utils import cpp_extension

    home = getattr(cpp_extension, "CUDA_HOME", None)
    return str(Path(home) / "bin" / "nvcc") if home else "nvcc"


def _mem_available_gib() -> float | None:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) / 2**20
    except OSError:
        pass
    return None
