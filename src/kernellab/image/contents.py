"""What an image holds, file by file: its layers applied in order, every file by content, never by time.

Two builds from the same lock should hold the same files, but Docker 20.10 cannot give them the same
image ID: BuildKit there dates every file it writes, and the image config, at the time of the build
(SOURCE_DATE_EPOCH for layers came with BuildKit 0.11, in Docker 23). So kernellab compares what is in
the images instead: each path with its type, mode, owner and content hash (or link target). `compare`
lists what differs; `invoke compare-images A B` prints it.
"""
from __future__ import annotations

import hashlib
import json
import posixpath
import tarfile
from dataclasses import dataclass
from typing import IO

from ..engine import Engine

#: A deleted path in a layer (OCI/Docker whiteout), and the marker that empties a directory.
_WHITEOUT, _OPAQUE = ".wh.", ".wh..wh..opq"


def files(engine: Engine, ref: str) -> dict[str, str]:
    """{path: "file <mode> <uid>:<gid> <sha256>" | "dir ..." | "link -> target" ...} of image `ref`."""
    with engine.save([ref]) as stream:
        return read_save(stream)


def read_save(stream: IO[bytes]) -> dict[str, str]:
    """The file table of the image in a save archive (docker-archive layout, read as a stream)."""
    layers: dict[str, dict[str, str | None]] = {}
    order: list[str] = []
    with tarfile.open(fileobj=stream, mode="r|") as outer:
        for member in outer:
            name = member.name
            if name == "manifest.json":
                data = outer.extractfile(member)
                order = json.loads(data.read())[0]["Layers"] if data else []
            elif member.isfile() and (name.endswith("/layer.tar") or name.startswith("blobs/")):
                data = outer.extractfile(member)
                if data is not None:
                    layer = _layer(data)
                    if layer is not None:
                        layers[name] = layer
    table: dict[str, str] = {}
    for name in order:
        for path, entry in layers.get(name, {}).items():
            if entry is None:  # a whiteout: the path (and anything under it) is gone
                table = {p: e for p, e in table.items() if p != path and not p.startswith(path + "/")}
            elif entry == "opaque":
                table = {p: e for p, e in table.items() if not p.startswith(path + "/")}
            else:
                table[path] = entry
    return table


def _layer(data: IO[bytes]) -> dict[str, str | None] | None:
    """One layer: {path: entry}, None for a whiteout, "opaque" for an emptied directory; None if not a tar."""
    found: dict[str, str | None] = {}
    try:
        with tarfile.open(fileobj=data, mode="r|") as tar:
            for m in tar:
                path = "/" + posixpath.normpath(m.name).lstrip("./")
                base = posixpath.basename(path)
                if base == _OPAQUE:
                    found[posixpath.dirname(path)] = "opaque"
                elif base.startswith(_WHITEOUT):
                    found[posixpath.join(posixpath.dirname(path), base[len(_WHITEOUT):])] = None
                else:
                    found[path] = _entry(tar, m)
    except tarfile.ReadError:
        return None  # a config or other blob in an OCI layout
    return found


def _entry(tar: tarfile.TarFile, m: tarfile.TarInfo) -> str:
    who = f"{m.mode & 0o7777:o} {m.uid}:{m.gid}"
    if m.isfile():
        digest = hashlib.sha256()
        data = tar.extractfile(m)
        if data is not None:
            while chunk := data.read(1 << 20):
                digest.update(chunk)
        return f"file {who} {digest.hexdigest()}"
    if m.issym():
        return f"symlink {who} -> {m.linkname}"
    if m.islnk():
        return f"hardlink {who} -> /{m.linkname.lstrip('./')}"
    kind = "dir" if m.isdir() else "device" if m.ischr() or m.isblk() else "fifo" if m.isfifo() else "other"
    return f"{kind} {who}"


@dataclass(frozen=True)
class Comparison:
    same: int
    only_a: list[str]
    only_b: list[str]
    differ: list[str]

    @property
    def identical(self) -> bool:
        return not (self.only_a or self.only_b or self.differ)

    def summary(self, a: str, b: str, limit: int = 20) -> str:
        lines = [f"{self.same} paths the same; {len(self.differ)} differ; {len(self.only_a)} only in {a}; "
                 f"{len(self.only_b)} only in {b}"]
        for title, paths in (("differ", self.differ), (f"only in {a}", self.only_a), (f"only in {b}", self.only_b)):
            if paths:
                lines.append(f"{title}:")
                lines += [f"  {p}" for p in paths[:limit]]
                if len(paths) > limit:
                    lines.append(f"  ... and {len(paths) - limit} more")
        return "\n".join(lines)


def compare(a: dict[str, str], b: dict[str, str]) -> Comparison:
    both = set(a) & set(b)
    differ = sorted(p for p in both if a[p] != b[p])
    return Comparison(len(both) - len(differ), sorted(set(a) - set(b)), sorted(set(b) - set(a)), differ)
