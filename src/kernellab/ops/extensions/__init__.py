"""Build and load kernel extensions: torch.utils.cpp_extension and ninja, in a persistent build folder.

The folder is `$KERNELLAB_CACHE/torch_extensions/<name>-<key>`, where the key hashes what decides the
build's *commands* (source paths, flags, arch list, torch/CUDA/Python versions) but not the sources'
contents: editing one `.cu` keeps the folder, and ninja recompiles only that file and relinks.
A compile error becomes an ExtensionError with the compiler's own lines; a library that needs a
symbol no source defines is caught at load, with the symbol demangled.

A failed build is remembered per build folder with a fingerprint of what it compiled (the sources,
every header they include from their folder or the include dirs, the compilers): until that
changes, the same error is raised again without compiling, in this process and in the next ones
(`failure.json` in the build folder). Without this, torch's in-process versioner skips ninja for
unchanged sources after a failure and tries to load a library that was never built.

nvcc runs without its dependency pass (TORCH_EXTENSION_SKIP_NVCC_GEN_DEPENDENCIES): on the H100 machine
that pass cost 0.3 s of a 2 s one-file rebuild. Which headers each `.cu` includes from its folder and the
include dirs is tracked here instead (`headers.json`): when they change, that source's object is removed,
so ninja compiles it again. Headers from elsewhere (torch's, CUDA's) are covered by the folder's key.

With `kernel_library=True` (what `invoke watch` asks for), a CUDA op's `.cu` files go into a library of
their own, `lib<name>_kernels.so`, linked against the CUDA runtime only, which the binding's library
(cpp_extension, torch's libraries) names by path. Editing a `.cu` then recompiles it and relinks that small
library; the binding's library, whose link against torch's libraries took 0.33 s of a 2 s rebuild on the
H100 machine, is left as it was. The `.cu` files compile with torch's own nvcc command (read from the ninja
file cpp_extension writes for them), so nothing about them differs from the one-library build. A process
that already loaded the library would keep the old code: only a fresh process (a watch round, forked)
should ask for it.

Modules: `toolchain` (flags, archs, compile jobs, nvcc), `sources` (what the sources include; the inputs'
fingerprint), `folder` (the build folder's key, its headers and resources records, its lock), `failures`
(remembered and explained failures, torch's versioner), `kernel_library` (lib<name>_kernels.so) and
`builder` (`build`, `Build`).
"""
from __future__ import annotations

from ... import cache_root
from .builder import Build, build
from .failures import FAILURE_RECORD
from .folder import HEADERS_RECORD, build_directory, forget_stale_objects
from .kernel_library import KERNELS_NINJA, TORCH_KERNELS_NINJA, kernels_ninja
from .sources import content_digest, cuda_headers, inputs_fingerprint, reaches_torch
from .toolchain import (
    CUDA_FLAGS,
    CXX_FLAGS,
    GIB_PER_JOB,
    PARALLEL_NVCC,
    SPLIT_COMPILE_THREADS,
    arch_list,
    cuda_flags,
    max_jobs,
    nvcc_options,
    plain_arch_list,
    with_arch_specific,
)

__all__ = [
    "CUDA_FLAGS", "CXX_FLAGS", "FAILURE_RECORD", "GIB_PER_JOB", "HEADERS_RECORD", "KERNELS_NINJA", "PARALLEL_NVCC",
    "SPLIT_COMPILE_THREADS", "TORCH_KERNELS_NINJA", "Build", "arch_list", "build", "build_directory", "cache_root",
    "content_digest", "cuda_flags", "cuda_headers", "forget_stale_objects", "inputs_fingerprint", "kernels_ninja", "max_jobs",
    "nvcc_options", "plain_arch_list", "reaches_torch", "with_arch_specific",
]
