"""The persistent build folder of an extension and what is kept in it besides ninja's own files: the
folder's path (`$KERNELLAB_CACHE/torch_extensions/<name>-<key>`, keyed by what decides the build's
commands), the headers record (`headers.json`) by which stale `.cu` objects are removed, the kernels'
resource record (`resources.json`, from ptxas' reports), the folder lock of a kernel-library build, and
the atomic JSON write the records use. The failure record (`failure.json`) is kernellab.ops.extensions.failures'.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any, Iterator, Sequence

from ... import cache_root
from ..compilerlog import KernelResources, parse_ptxas
from .toolchain import CXX_FLAGS, arch_list, cuda_flags

#: Per build folder: the local headers each .cu included at its last build, by content hash.
HEADERS_RECORD = "headers.json"


def build_directory(name: str, sources: Sequence[Path], *, cuda: bool, include_dirs: Sequence[Path] = (),
                    kernel_library: bool = False) -> Path:
    """The persistent build folder of an extension (see kernellab.ops.extensions' docstring for its key)."""
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


def _write_json(path: Path, data: Any) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    try:
        tmp.write_text(json.dumps(data, indent=1, sort_keys=True))
        tmp.replace(path)  # atomic: a concurrent reader sees all or nothing
    except OSError:
        pass  # a read-only cache: the objects are then compiled again next time
