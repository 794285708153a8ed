"""The kernels' own library of a `kernel_library=True` build: an op's `.cu` files compiled with torch's own
nvcc command (read from the ninja file cpp_extension writes for them, never run) and linked against the
CUDA runtime alone into `lib<name>_kernels.so`, by a ninja file of its own (`kernels.ninja`) in the op's
build folder. The binding's library then names it by path, so editing a `.cu` relinks only this small
library.
"""
from __future__ import annotations

import inspect
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Sequence

from .toolchain import CXX_FLAGS, cuda_flags, max_jobs

#: In a build folder with kernel_library: torch's ninja file for the .cu files alone (read, never run),
#: and the one made from it that builds lib<name>_kernels.so.
TORCH_KERNELS_NINJA, KERNELS_NINJA = "kernels.torch.ninja", "kernels.ninja"


def _kernel_library(name: str, sources: Sequence[Path], include_dirs: Sequence[Path], directory: Path) -> Path | None:
    """Compile `sources` (.cu) with torch's nvcc command and link them, against the CUDA runtime only, into
    directory/lib<name>_kernels.so; return it. None when torch's ninja file lacks what this reads (another
    torch version's format): the caller then builds one library as usual. A compile error raises
    RuntimeError("Error building extension ...") with the compiler's lines on fd 1/2, as cpp_extension does."""
    from torch.utils import cpp_extension

    write = getattr(cpp_extension, "_write_ninja_file_to_build_library", None)
    if write is None:
        return None
    wanted = {"path": str(directory / TORCH_KERNELS_NINJA), "name": name, "sources": [str(s) for s in sources],
              "extra_cflags": list(CXX_FLAGS), "extra_cuda_cflags": list(cuda_flags()), "extra_sycl_cflags": [],
              "extra_ldflags": [], "extra_include_paths": [str(d) for d in include_dirs], "with_cuda": True,
              "with_sycl": False, "is_standalone": False}
    try:
        params = inspect.signature(write).parameters
        if not {n for n, p in params.items() if p.default is p.empty} <= set(wanted):
            return None
        write(**{k: v for k, v in wanted.items() if k in params})
        text = (directory / TORCH_KERNELS_NINJA).read_text()
    except (OSError, TypeError, ValueError):
        return None
    ninja = kernels_ninja(text, f"lib{name}_kernels.so", [f"-L{d}" for d in _cuda_library_dirs()] + ["-lcudart"])
    if ninja is None:
        return None
    file = directory / KERNELS_NINJA
    if not file.is_file() or file.read_text() != ninja:
        file.write_text(ninja)
    beside = Path(sys.executable).with_name("ninja")  # the venv's (pip's ninja), else the one on PATH
    argv = [str(beside) if beside.is_file() else "ninja", "-v", "-f", KERNELS_NINJA,
            "-j", os.environ.get("MAX_JOBS") or str(max_jobs())]
    done = subprocess.run(argv, cwd=directory, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          errors="replace")
    sys.stdout.write(done.stdout)  # into the build log, where the compiler's lines and ptxas' reports are read
    sys.stdout.flush()
    if done.returncode != 0:
        if "FAILED:" in done.stdout:  # a build step failed: the compiler's (or linker's) own error
            raise RuntimeError(f"Error building extension '{name}': its kernels (.cu) did not compile")
        raise RuntimeError(f"{name}: ninja could not build its kernels' library: {done.stdout.strip()[-500:]}")
    return directory / f"lib{name}_kernels.so"


def _cuda_library_dirs() -> list[str]:
    """Where torch's extension builds find the CUDA runtime (and torch's own libraries)."""
    from torch.utils import cpp_extension

    try:
        return list(cpp_extension.library_paths(device_type="cuda"))
    except TypeError:  # torch before 2.6
        return list(cpp_extension.library_paths(cuda=True))  # type: ignore[call-arg]


def kernels_ninja(torch_ninja: str, target: str, ldflags: Sequence[str]) -> str | None:
    """The ninja file that builds `target` from the .cu objects of torch's ninja file: its variables and
    compile rules as they are, its link replaced by one with `ldflags` (the CUDA runtime alone, not torch's
    libraries). None when torch_ninja has no cuda_compile builds."""
    lines = torch_ninja.splitlines()
    objects = [m.group(1) for line in lines if (m := re.match(r"build (\S+): cuda_compile ", line))]
    if not objects:
        return None
    kept = [line for line in lines if not line.startswith(("default ", "build ")) or " cuda_compile " in line]
    # builddir: its own .ninja_log and .ninja_deps, apart from those of torch's build of the binding (which
    # may run another ninja version, and compacts the files it owns).
    return "\n".join(["builddir = kernels-ninja", *kept, "", f"kernel_ldflags = -shared {' '.join(ldflags)}", "rule kernel_link",
                      "  command = $cxx $in $kernel_ldflags -o $out", "",
                      f"build {target}: kernel_link {' '.join(objects)}", f"default {target}", ""])
