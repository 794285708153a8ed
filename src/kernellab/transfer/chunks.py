"""The bundle's bytes: one zstd stream cut into fixed-size chunk files, each with its sha256.

Writing compresses with multithreaded zstd straight into the chunk files, so memory stays flat
whatever the image size. Reading checks every chunk before anything reaches an engine, and hashes
each chunk again as it is decompressed, so a file changed after verification stops the load.
"""
from __future__ import annotations

import hashlib
import os
import re
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any

import zstandard

from ..errors import TransferError
from .manifest import Chunk, Manifest, read_manifest

CHUNK_PREFIX = "image.tar.zst."
DEFAULT_CHUNK_SIZE = 1 << 30
DEFAULT_LEVEL = 3  # on mixed image data: smaller than gzip -6 and ~15x faster on 2 cores
COPY_BLOCK = 1 << 20
# Multithreaded zstd holds a few jobs per worker in memory; 2 MiB jobs instead of the default
# 8 MiB cut the compressor from ~110 MB to ~30 MB for output 0.5% larger (measured at level 3).
JOB_SIZE = 2 << 20
#: Called with (phase, bytes done, bytes expected or None); phases: "export", "verify", "import".
Progress = Callable[[str, int, "int | None"], None]

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)i?b?\s*$", re.IGNORECASE)


def parse_size(text: str | int) -> int:
    """Bytes from a size such as 1G, 512M, 64k or 1048576 (binary units)."""
    if isinstance(text, int):
        value = text
    else:
        m = _SIZE.match(str(text))
        if not m:
            raise TransferError(f"Cannot read the size {text!r}; write it like 1G, 512M or 65536.")
        value = int(float(m.group(1)) * 1024 ** " kmgt".index((m.group(2) or " ").lower()))
    if value < 1024:
        raise TransferError(f"A chunk size of {value} bytes is too small; use at least 1k (e.g. 1G).")
    return value


def check_level(level: int) -> int:
    if not 1 <= int(level) <= 22:
        raise TransferError(f"zstd level {level} is out of range; pick 1 (fastest) to 22 (smallest), 3 is the default.")
    return int(level)


def compressor(level: int) -> zstandard.ZstdCompressor:
    params = zstandard.ZstdCompressionParameters.from_level(level, threads=-1, job_size=JOB_SIZE, write_checksum=1)
    return zstandard.ZstdCompressor(compression_params=params)


# ---------------------------------------------------------------- writing


class ChunkWriter:
    """A write-only stream cut into fixed-size files, each with its sha256."""

    def __init__(self, folder: Path, chunk_size: int, width: int):
        self.folder, self.chunk_size, self.width = folder, chunk_size, width
        self.chunks: list[Chunk] = []
        self.stream = hashlib.sha256()
        self.total = 0
        self._file: IO[bytes] | None = None
        self._hash = hashlib.sha256()
        self._size = 0

    def write(self, data: bytes) -> int:
        view = memoryview(data)
        while view:
            if self._file is None:
                name = f"{CHUNK_PREFIX}{len(self.chunks):0{self.width}d}"
                self._file = open(self.folder / name, "wb")  # kept open across writes
                self.chunks.append(Chunk(name))
            piece = view[:self.chunk_size - self._size]
            self._file.write(piece)
            self._hash.update(piece)
            self.stream.update(piece)
            self._size += len(piece)
            self.total += len(piece)
            view = view[len(piece):]
            if self._size == self.chunk_size:
                self._seal()
        return len(data)

    def flush(self) -> None:
        pass

    def _seal(self) -> None:
        assert self._file is not None
        self._file.flush()
        os.fsync(self._file.fileno())  # a full disk shows here at the latest, not after the rename
        self._file.close()
        self.chunks[-1].size, self.chunks[-1].sha256 = self._size, self._hash.hexdigest()
        self._file, self._hash, self._size = None, hashlib.sha256(), 0

    def close(self) -> None:
        if self._file is not None:
            self._seal()

    def abandon(self) -> None:
        """Close the open file of a failed stream; the caller removes the folder."""
        if self._file is not None:
            self._file.close()
            self._file = None


class Counter:
    """Wraps a readable stream to report progress at most a few times a second."""

    def __init__(self, src: IO[bytes] | None, phase: str, total: int | None, progress: Progress | None):
        self.src, self.phase, self.total, self.progress = src, phase, total, progress
        self.done = 0
        self._last = 0.0

    def read(self, n: int = -1) -> bytes:
        assert self.src is not None
        data = self.src.read(n)
        self.done += len(data)
        now = time.monotonic()
        if self.progress and (now - self._last > 0.25 or not data):
            self._last = now
            self.progress(self.phase, self.done, self.total)
        return data


# ---------------------------------------------------------------- reading


class FdSink:
    """Unbuffered writes to a pipe, so a loader that stops reading leaves nothing to flush."""

    def __init__(self, fd: int):
        self.fd = fd

    def write(self, data: bytes) -> int:
        view = memoryview(data)
        while view:
            view = view[os.write(self.fd, view):]
        return len(data)

    def flush(self) -> None:
        pass


def blocks(path: Path) -> Iterator[bytes]:
    with open(path, "rb") as f:
        yield from iter(lambda: f.read(COPY_BLOCK), b"")


def decompress(bundle: Path, manifest: Manifest, sink: Any, progress: Progress | None) -> None:
    """Write the save archive the chunks hold into sink (anything with write(bytes))."""
    # Chunks are hashed again as they are read: a file changed since verification stops the load.
    total = manifest.stream.compressed
    done = 0
    with zstandard.ZstdDecompressor().stream_writer(sink, closefd=False) as z:
        for chunk in manifest.chunks:
            digest = hashlib.sha256()
            for block in blocks(bundle / chunk.name):
                digest.update(block)
                z.write(block)
                done += len(block)
                if progress:
                    progress("import", done, total)
            if digest.hexdigest() != chunk.sha256:
                raise TransferError(f"{chunk.name} changed while it was being read; copy it again and rerun.")


# ---------------------------------------------------------------- verifying


def verify_bundle(bundle: Path | str, progress: Progress | None = None) -> Manifest:
    """Check every chunk against the manifest; name each missing, truncated or corrupt chunk."""
    bundle = Path(bundle)
    manifest = read_manifest(bundle)
    chunks = manifest.chunks
    total = sum(c.size for c in chunks)
    done = 0
    stream = hashlib.sha256()
    bad: list[str] = []
    for chunk in chunks:
        path = bundle / chunk.name
        if not path.is_file():
            bad.append(f"{chunk.name} (missing)")
            continue
        size = path.stat().st_size
        if size != chunk.size:
            bad.append(f"{chunk.name} ({'truncated' if size < chunk.size else 'too long'}: "
                       f"{size} of {chunk.size} bytes)")
            continue
        digest = hashlib.sha256()
        for block in blocks(path):
            digest.update(block)
            stream.update(block)
            done += len(block)
            if progress:
                progress("verify", done, total)
        if digest.hexdigest() != chunk.sha256:
            bad.append(f"{chunk.name} (corrupt: sha256 differs)")
    if bad and len(bad) == len(chunks) and _foreign(bundle, manifest):
        raise TransferError(f"No chunk in {bundle} matches its manifest.json, which describes "
                            f"{manifest.describe()}: the manifest belongs to another bundle; copy the "
                            "bundle folder again as a whole; nothing was loaded.")
    if bad:
        shown = ", ".join(bad[:6]) + (f" and {len(bad) - 6} more" if len(bad) > 6 else "")
        raise TransferError(f"{len(bad)} of {len(chunks)} chunks in {bundle} are bad: {shown}; "
                            "copy those files again from the sender and rerun; nothing was loaded.")
    if stream.hexdigest() != manifest.stream.sha256:
        raise TransferError(f"The chunks of {bundle} are each intact but do not add up to the exported stream; "
                            "copy the bundle folder again as a whole; nothing was loaded.")
    return manifest


def _foreign(bundle: Path, manifest: Manifest) -> bool:
    """Whether chunk files are there but are not the ones the manifest describes (a mixed-up copy)."""
    present = {p.name for p in bundle.glob(CHUNK_PREFIX + "*")}
    listed = {c.name for c in manifest.chunks}
    sums = bundle / "SHA256SUMS"
    # One damaged chunk of a one-chunk bundle looks the same as a foreign one: call that damage.
    return bool(present) and (present != listed or len(listed) > 1
                              or (sums.is_file() and sums.read_text() != manifest.sums()))
