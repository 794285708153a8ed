"""Building and loading one extension: `build` puts the pieces together (the arch list it sets, the folder,
a known failure raised again, stale objects removed, the kernels' library when asked for), runs
torch.utils.cpp_extension's ninja build with what it writes to fds 1 and 2 captured into the folder's
`build.log`, retries once when torch's versioner skipped the build, and returns a `Build` (the loaded
library, whether anything compiled, the kernels' ptxas resources) or raises an ExtensionError.
"""
from __future__ import annotations

import contextlib
import os
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Callable, Iterator, Sequence

from ...errors import ExtensionError
from ..compilerlog import KernelResources
from .failures import (
    CRASHED,
    _explain,
    _force_rebuild,
    _forget_failure,
    _is_compile_error,
    _known_failure,
    _rebuild_skipped,
    _remember_failure,
)
from .folder import (
    HEADERS_RECORD,
    _folder_lock,
    _record_headers,
    _update_resources,
    _write_json,
    build_directory,
    forget_stale_objects,
)
from .kernel_library import _kernel_library
from .sources import cuda_headers, inputs_fingerprint, reaches_torch
from .toolchain import CXX_FLAGS, cuda_flags, max_jobs, plain_arch_list, with_arch_specific


@dataclass(frozen=True)
class Build:
    """A built and loaded extension."""

    name: str  # the library's name, which is also its TORCH_LIBRARY namespace
    library: Path
    directory: Path
    seconds: float
    compiled: bool  # False when ninja found everything up to date
    resources: tuple[KernelResources, ...]
    kernels: Path | None = None  # the .cu files' own library (kernel_library=True), which `library` loads

    @property
    def device_code(self) -> Path:
        """The library that holds the GPU code (cubins): the kernels' own, or the one library."""
        return self.kernels or self.library


def build(
    name: str,
    sources: Sequence[Path],
    *,
    cuda: bool,
    include_dirs: Sequence[Path] = (),
    verbose: bool = False,
    arch_specific: Sequence[str] = (),
    kernel_library: bool = False,
) -> Build:
    """Compile (only what changed) and load an extension whose sources register ops with TORCH_LIBRARY.

    `name` must be a C identifier: it becomes TORCH_EXTENSION_NAME, the namespace under torch.ops.
    Sources that failed to build before and have not changed since raise the same ExtensionError
    again, without compiling. `arch_specific` ("9.0a"): build those variants instead of their plain
    arch (with_arch_specific); the caller checks that this toolkit can. `kernel_library`: the .cu files in
    a library of their own (see kernellab.ops.extensions' docstring), for a process that has not loaded this extension yet.
    """
    from torch.utils import cpp_extension

    if cuda:
        # Set, not just computed: cpp_extension reads it, and the build folder is keyed by it.
        os.environ["TORCH_CUDA_ARCH_LIST"] = with_arch_specific(plain_arch_list(), arch_specific)
        os.environ["TORCH_EXTENSION_SKIP_NVCC_GEN_DEPENDENCIES"] = "1"  # headers: see forget_stale_objects
    os.environ.setdefault("MAX_JOBS", str(max_jobs()))
    kernel_sources = [Path(s) for s in sources if Path(s).suffix == ".cu"] if cuda and kernel_library else []
    # Some .cu and a binding beside them; and no .cu that reaches torch's headers, whose symbols a library
    # linked against the CUDA runtime alone would lack.
    split = 0 < len(kernel_sources) < len(sources) and not reaches_torch(kernel_sources, include_dirs)
    directory = build_directory(name, sources, cuda=cuda, include_dirs=include_dirs, kernel_library=split)
    directory.mkdir(parents=True, exist_ok=True)
    fingerprint = inputs_fingerprint(sources, include_dirs, cuda=cuda)
    known = _known_failure(directory, fingerprint)
    if known is not None:
        if verbose:
            sys.stdout.write(f"{name}: unchanged since its failed build ({directory / 'build.log'}); not compiling\n")
        raise ExtensionError(known)
    headers = cuda_headers(sources, include_dirs) if cuda else {}
    forget_stale_objects(directory, headers)

    kernels: Path | None = None

    def load() -> Path:
        nonlocal kernels
        linked, extra_ldflags = list(sources), []
        if split:
            kernels = _kernel_library(name, kernel_sources, include_dirs, directory)
            if kernels is None:  # torch's ninja file was not what this reads: one library after all
                sys.stdout.write(f"{name}: one library (torch's ninja file for the .cu files is not the one expected)\n")
            else:
                linked, extra_ldflags = [s for s in sources if Path(s).suffix != ".cu"], [str(kernels)]
                # The .cu objects are good whatever happens to the binding: keep them past a failed link.
                _record_headers(directory, {k: v for k, v in headers.items() if k.endswith(".cuda.o")})
        made = cpp_extension.load(
            name=name,
            sources=[str(s) for s in linked],
            extra_cflags=list(CXX_FLAGS),
            extra_cuda_cflags=list(cuda_flags()) if cuda else None,
            extra_ldflags=extra_ldflags,
            extra_include_paths=[str(d) for d in include_dirs],
            build_directory=str(directory),
            verbose=True,  # ninja then writes to fd 1, which _captured_output() collects
            with_cuda=cuda,
            is_python_module=False,
        )
        # torch >= 2.0 returns the library's path; 1.x loads it and returns None (the path is torch's own choice).
        return Path(made) if made else directory / f"{name}.so"

    started_wall, started = time.time(), time.perf_counter()
    failure: BaseException | None = None
    library: Path | None = None
    with _captured_output() as captured, _folder_lock(directory, split):
        try:
            library = load()
        except (RuntimeError, OSError) as e:
            failure = e
        if failure is not None and not _is_compile_error(failure) and _rebuild_skipped(name, directory):
            # torch compiled nothing (same source text as its failed call earlier in this process, only a
            # header changed, or another process held the build lock and failed): compile for real once,
            # so the error is the compiler's and not a missing library's.
            failure, library = _again(name, load)
        # The log until now when the compiler crashed (CI met Debian's nvcc 12.4 segfaulting once on a source it
        # compiles every other time): then the build runs once more, before the run fails for it.
        crashed = captured.so_far() if failure is not None and _is_compile_error(failure) else ""
        if CRASHED.search(crashed):
            failure, library = _again(name, load)
        else:
            crashed = ""
    seconds = time.perf_counter() - started
    log = captured.text
    if verbose:
        sys.stdout.write(log)
    if crashed:
        sys.stderr.write(f"{name}: the compiler crashed, and the build was run once more\n")
        # What the second try met is what counts: its own error is kept and explained, not the crash's.
        log = log[len(crashed):]
    if failure is not None:
        (directory / "build.log").write_text(log)
        error = _explain(name, failure, log, directory)
        _remember_failure(directory, fingerprint, error, failure, log)
        raise error from None
    assert library is not None
    _forget_failure(directory)
    _write_json(directory / HEADERS_RECORD, headers)
    compiled = max(p.stat().st_mtime for p in (library, kernels) if p is not None) >= started_wall
    if compiled:  # keep the last real build's log, not a later "no work to do"
        (directory / "build.log").write_text(log)
    resources = _update_resources(directory, log, sources)
    return Build(library.stem, library, directory, seconds, compiled, resources, kernels)


def _again(name: str, load: Callable[[], Path]) -> tuple[BaseException | None, Path | None]:
    """load() once more, compiling for real (torch's versioner would otherwise skip sources it saw fail)."""
    _force_rebuild(name)
    try:
        return None, load()
    except (RuntimeError, OSError) as e:
        return e, None


class _Captured:
    text = ""
    sink: IO[bytes] | None = None

    def so_far(self) -> str:
        """What the child processes wrote until now."""
        if self.sink is None:
            return self.text
        sys.stdout.flush()
        sys.stderr.flush()
        self.sink.seek(0)
        data = self.sink.read().decode(errors="replace")
        self.sink.seek(0, os.SEEK_END)
        return data


@contextlib.contextmanager
def _captured_output() -> Iterator[_Captured]:
    """Collect what child processes write to fds 1 and 2 (ninja's log), instead of the terminal."""
    captured = _Captured()
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    with tempfile.TemporaryFile() as sink:
        captured.sink = sink
        os.dup2(sink.fileno(), 1)
        os.dup2(sink.fileno(), 2)
        try:
            yield captured
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            os.close(saved[0])
            os.close(saved[1])
            captured.text = captured.so_far()
            captured.sink = None
