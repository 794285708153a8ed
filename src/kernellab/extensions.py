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
"""
from __future__ import annotations

import contextlib
import functools
import hashlib
import inspect
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Iterator, Sequence

from . import cache_root, proc
from .compilerlog import KernelResources, compiler_messages, demangle, parse_ptxas
from .errors import ExtensionError, KernellabError
from .targets import vkey

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
#: Per build folder: the local headers each .cu included at its last build, by content hash.
HEADERS_RECORD = "headers.json"
CXX_FLAGS = ("-O3",)
#: Peak memory of one compile job with torch headers (nvcc or g++), for sizing MAX_JOBS.
GIB_PER_JOB = 1.5
#: In the build folder: the last failed build's fingerprint and error, while its inputs are unchanged.
FAILURE_RECORD = "failure.json"


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


def build_directory(name: str, sources: Sequence[Path], *, cuda: bool, include_dirs: Sequence[Path] = (),
                    kernel_library: bool = False) -> Path:
    """The persistent build folder of an extension (see the module docstring for its key)."""
    import torch

    key: dict[str, Any] = {
        "name": name,
        "sources": sorted(str(Path(s).resolve()) for s in sources),
        "include_dirs": [str(Path(d).resolve()) for d in include_dirs],
        "cxx_flags": CXX_FLAGS,
        "cuda_flags": cuda_flags() if cuda else None,
        "arch_list": arch_list() if cuda else None,
        "torch": torch.__version__,
        "cuda": torch.version.cuda if cuda else None,
        "python": f"{sys.version_info.major}.{sys.version_info.minor}",
        "cxx": os.environ.get("CXX", "c++"),
    }
    if kernel_library:  # a folder of its own: its binding library is linked differently
        key["kernel_library"] = True
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:12]
    return cache_root() / "torch_extensions" / f"{name}-{digest}"


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
    a library of their own (see the module docstring), for a process that has not loaded this extension yet.
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
        return Path(cpp_extension.load(
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
        ))

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
            _force_rebuild(name)
            failure = None
            try:
                library = load()
            except (RuntimeError, OSError) as e:
                failure = e
    seconds = time.perf_counter() - started
    log = captured.text
    if verbose:
        sys.stdout.write(log)
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


def reaches_torch(sources: Sequence[Path], include_dirs: Sequence[Path] = ()) -> bool:
    """Whether `sources` include one of torch's headers (torch/, ATen/, c10/), directly or through local ones."""
    return any(_TORCH_HEADER.match(line) for line in _included(sources, include_dirs))


def _recorded_headers(directory: Path) -> dict[str, str]:
    """The folder's headers record (see forget_stale_objects); empty when missing or unreadable."""
    try:
        recorded = json.loads((directory / HEADERS_RECORD).read_text())
    except (OSError, ValueError):
        return {}
    return recorded if isinstance(recorded, dict) else {}


def _record_headers(directory: Path, entries: dict[str, str]) -> None:
    """Merge `entries` into the folder's headers record."""
    _write_json(directory / HEADERS_RECORD, {**_recorded_headers(directory), **entries})


@contextlib.contextmanager
def _folder_lock(directory: Path, held: bool) -> Iterator[None]:
    """With `held`: this folder's build to this process alone (an flock, released if the process dies).
    cpp_extension locks only its own part; the kernels' library is built before it, in the same folder."""
    if not held:
        yield
        return
    import fcntl

    with open(directory / "kernels.lock", "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def inputs_fingerprint(sources: Sequence[Path], include_dirs: Sequence[Path] = (), *, cuda: bool) -> str:
    """A hash of what a build compiles that its folder's key leaves out: the sources' contents, the
    headers they include (from the including file's folder or the include dirs, transitively), and
    which compilers, by path, size and time. Headers found nowhere there (torch's, the system's) count
    by name: the folder's key already covers the torch version and the flags.
    """
    digest = hashlib.sha256()
    for line in _included(sources, include_dirs):
        digest.update(f"{line}\n".encode())
    compilers = [os.environ.get("CXX", "c++")] + ([_nvcc()] if cuda else [])
    for compiler in compilers:
        found_at = shutil.which(compiler) if compiler else None
        if found_at:
            st = Path(found_at).resolve().stat()
            digest.update(f"compiler {Path(found_at).resolve()} {st.st_size} {st.st_mtime_ns}\n".encode())
        else:
            digest.update(f"compiler {compiler} not found\n".encode())
    return digest.hexdigest()


def _included(sources: Sequence[Path], include_dirs: Sequence[Path]) -> Iterator[str]:
    """One line per file that `sources` compile: `file PATH SHA256` for the sources and the headers they
    include from the including file's folder or the include dirs (transitively), `elsewhere <NAME>` for
    headers found in neither, `unreadable PATH` for a file that cannot be read."""
    dirs = [Path(d).resolve() for d in include_dirs]
    pending = sorted({Path(s).resolve() for s in sources})
    seen: set[Path] = set()
    while pending:
        path = pending.pop(0)
        if path in seen:
            continue
        seen.add(path)
        try:
            text = path.read_bytes()
        except OSError:
            yield f"unreadable {path}"
            continue
        yield f"file {path} {hashlib.sha256(text).hexdigest()}"
        for quote, header in _INCLUDE.findall(text.decode(errors="replace")):
            where = ([path.parent] if quote == '"' else []) + dirs
            found = next((d / header for d in where if (d / header).is_file()), None)
            if found is None:
                yield f"elsewhere {quote}{header}"
            else:
                pending.append(found.resolve())


def cuda_headers(sources: Sequence[Path], include_dirs: Sequence[Path] = ()) -> dict[str, str]:
    """For each .cu source, a hash of the local headers it includes (see _included), by its object's name."""
    record = {}
    for source in sources:
        path = Path(source)
        if path.suffix == ".cu":
            lines = list(_included([path], include_dirs))[1:]  # the source itself is ninja's to watch
            record[f"{path.stem}.cuda.o"] = hashlib.sha256("\n".join(lines).encode()).hexdigest()
    return record


def forget_stale_objects(directory: Path, headers: dict[str, str]) -> list[str]:
    """Remove the objects of .cu sources whose local headers changed since the last good build (or that
    no record covers), so that ninja, which runs nvcc without a dependency pass, compiles them again.
    Returns the names removed."""
    recorded = _recorded_headers(directory)
    removed = []
    for name, digest in headers.items():
        obj = directory / name
        if obj.exists() and recorded.get(name) != digest:
            with contextlib.suppress(OSError):
                obj.unlink()
                removed.append(name)
    return removed


def _write_json(path: Path, data: Any) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    try:
        tmp.write_text(json.dumps(data, indent=1, sort_keys=True))
        tmp.replace(path)  # atomic: a concurrent reader sees all or nothing
    except OSError:
        pass  # a read-only cache: the objects are then compiled again next time


def _nvcc() -> str:
    from torch.utils import cpp_extension

    home = getattr(cpp_extension, "CUDA_HOME", None)
    return str(Path(home) / "bin" / "nvcc") if home else "nvcc"


#: Failures remembered in this process, by build folder: (fingerprint, message).
_FAILED: dict[Path, tuple[str, str]] = {}


def _known_failure(directory: Path, fingerprint: str) -> str | None:
    """The message of the failed build of these very inputs, from this process or from the folder's record."""
    remembered = _FAILED.get(directory)
    if remembered is not None and remembered[0] == fingerprint:
        return remembered[1]
    try:
        record = json.loads((directory / FAILURE_RECORD).read_text())
    except (OSError, ValueError):
        return None
    if isinstance(record, dict) and record.get("fingerprint") == fingerprint and isinstance(record.get("message"), str):
        _FAILED[directory] = (fingerprint, record["message"])
        return record["message"]
    return None


def _remember_failure(directory: Path, fingerprint: str, error: ExtensionError, failure: BaseException,
                      log: str) -> None:
    """Keep a failure that the same inputs would meet again; forget one that a retry may not meet."""
    compile_error = _is_compile_error(failure) and not _TRANSIENT.search(log)
    # In this process also an undefined symbol: retrying its load would only fail the same way.
    if not (compile_error or _UNDEFINED.search(f"{failure} {failure.__cause__ or ''}")):
        _forget_failure(directory)
        return
    _FAILED[directory] = (fingerprint, str(error))
    if compile_error:
        # On disk too, so the next process (the next pytest, `invoke bench` after `invoke test`) gets
        # the compiler's error at once instead of compiling the same sources again to meet it.
        # Only compile errors: the fingerprint holds what a compiler reads, not what a loader finds.
        record = {"fingerprint": fingerprint, "message": str(error),
                  "when": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
        _write_json(directory / FAILURE_RECORD, record)  # read-only cache: the in-process memory still has it


def _is_compile_error(failure: BaseException) -> bool:
    return str(failure).startswith("Error building extension")


def _forget_failure(directory: Path) -> None:
    _FAILED.pop(directory, None)
    with contextlib.suppress(OSError):
        (directory / FAILURE_RECORD).unlink()


def _versioner() -> Any:
    """torch's in-process record of each extension's source hash and version (None if torch changed it)."""
    from torch.utils import cpp_extension

    versioner = getattr(cpp_extension, "JIT_EXTENSION_VERSIONER", None)
    return versioner if isinstance(getattr(versioner, "entries", None), dict) else None


def _rebuild_skipped(name: str, directory: Path) -> bool:
    """True when the library torch just tried to load does not exist: it ran no build, or one that failed
    elsewhere. (A compile failure of its own raises before loading, and is not this.)"""
    versioner = _versioner()
    if versioner is None:
        return False
    version = versioner.get_version(name)
    stem = f"{name}_v{version}" if version else name
    return not any((directory / f"{stem}{suffix}").exists() for suffix in (".so", ".dylib", ".pyd"))


def _force_rebuild(name: str) -> None:
    # A stale hash makes cpp_extension run ninja again, under the next versioned name (name_vN):
    # a library of the old name may be loaded in this process already and cannot be replaced.
    versioner = _versioner()
    entry = versioner.entries.get(name) if versioner is not None else None
    if entry is not None:
        versioner.entries[name] = entry._replace(hash=None)


_UNDEFINED = re.compile(r"undefined symbol: (\S+)")
_INCLUDE = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]', re.MULTILINE)
#: Compile failures that say nothing about the sources: a retry may well succeed, so none is remembered.
_TRANSIENT = re.compile(r"Killed signal|died due to signal|internal compiler error|No space left on device|"
                        r"virtual memory exhausted|Cannot allocate memory|out of memory", re.IGNORECASE)
#: _included's line for a header of torch's (not in the op's folders): `elsewhere <torch/extension.h>`.
_TORCH_HEADER = re.compile(r'elsewhere [<"](torch|ATen|c10)/')


def _explain(name: str, error: BaseException, log: str, directory: Path) -> ExtensionError:
    text = str(error)
    if error.__cause__ is not None:  # torch.ops.load_library wraps the loader's OSError
        text += f": {error.__cause__}"
    if _is_compile_error(error):
        messages = compiler_messages(log) or text
        return ExtensionError(f"{name} does not compile:\n{messages}\n(full log: {directory / 'build.log'})")
    if m := _UNDEFINED.search(text):
        symbol = demangle([m.group(1)])[0]
        return ExtensionError(
            f"{name} built, but loading it failed: nothing defines `{symbol}`. The binding declares it and "
            "no kernel source defines it with that exact name, namespace and parameter types; "
            "declare it once in the op's header and include that header in both files."
        )
    return ExtensionError(f"{name} could not be built or loaded: {text.strip()}")


def _update_resources(directory: Path, log: str, sources: Sequence[Path]) -> tuple[KernelResources, ...]:
    """Merge this build's ptxas reports into the folder's record: unchanged sources keep their last report."""
    record = directory / "resources.json"
    try:
        known = {src: [KernelResources(**r) for r in rows] for src, rows in json.loads(record.read_text()).items()}
    except (OSError, ValueError, TypeError):
        known = {}
    known.update(parse_ptxas(log))
    wanted = {str(Path(s).resolve()) for s in sources}
    known = {src: rows for src, rows in known.items() if str(Path(src).resolve()) in wanted}
    record.write_text(json.dumps({src: [asdict(r) for r in rows] for src, rows in known.items()}, indent=1))
    return tuple(r for src in sorted(known) for r in known[src])


class _Captured:
    text = ""


@contextlib.contextmanager
def _captured_output() -> Iterator[_Captured]:
    """Collect what child processes write to fds 1 and 2 (ninja's log), instead of the terminal."""
    captured = _Captured()
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    with tempfile.TemporaryFile() as sink:
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
            sink.seek(0)
            captured.text = sink.read().decode(errors="replace")


def _mem_available_gib() -> float | None:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) / 2**20
    except OSError:
        pass
    return None

