"""What a build compiles, read without compiling: the files `sources` include from their own folder or the
include dirs (transitively, by `#include` lines), the fingerprint of those files and the compilers that
decides whether a remembered failure still holds, the per-`.cu` hash of its local headers that replaces
nvcc's dependency pass, and whether a `.cu` reaches torch's headers (then it cannot go into a library linked
against the CUDA runtime alone).
"""
from __future__ import annotations

import hashlib
import os
import re
import shutil
from pathlib import Path
from typing import Iterator, Mapping, Sequence

from .toolchain import _nvcc

_INCLUDE = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]', re.MULTILINE)
#: _included's line for a header of torch's (not in the op's folders): `elsewhere <torch/extension.h>`.
_TORCH_HEADER = re.compile(r'elsewhere [<"](torch|ATen|c10)/')


def reaches_torch(sources: Sequence[Path], include_dirs: Sequence[Path] = ()) -> bool:
    """Whether `sources` include one of torch's headers (torch/, ATen/, c10/), directly or through local ones."""
    return any(_TORCH_HEADER.match(line) for line in _included(sources, include_dirs))


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


def content_digest(sources: Sequence[Path], include_dirs: Sequence[Path],
                   names: Mapping[Path, str]) -> tuple[str, dict[str, str]]:
    """What `sources` compile, by content alone: each file (the sources, and the headers they include from the
    including file's folder or the include dirs, transitively) with the sha256 of its bytes, and one sha256 over
    those pairs. A file is named by the folder of `names` it lies in (the first that holds it: `names[folder]/path
    under it`), else by its absolute path. Unlike inputs_fingerprint, no compiler and no machine's path: two checkouts
    holding the same kernel code give the same digest, wherever they lie and whatever commit they name. A file that
    cannot be read is listed as `unreadable`."""
    folders = [(Path(folder).resolve(), name) for folder, name in names.items()]
    files: dict[str, str] = {}
    for line in _included(sources, include_dirs):
        kind, _, rest = line.partition(" ")
        if kind == "elsewhere":
            continue  # torch's and the system's headers: the environment stamp names those versions
        path, _, sha = rest.rpartition(" ") if kind == "file" else (rest, "", "unreadable")
        files[_named(Path(path), folders)] = sha
    files = dict(sorted(files.items()))
    listing = "".join(f"{name} {sha}\n" for name, sha in files.items())
    return hashlib.sha256(listing.encode()).hexdigest(), files


def _named(path: Path, folders: Sequence[tuple[Path, str]]) -> str:
    for folder, name in folders:
        if path.is_relative_to(folder):
            return f"{name}/{path.relative_to(folder).as_posix()}"
    return str(path)


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
