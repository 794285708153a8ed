"""The engine's save archive, read as a stream by the standard library's tar reader.

`copy_archive` passes the archive through member by member (memory stays flat), leaving out the
layer files a delta bundle does not ship and hashing them as they pass. Headers are written anew
(PAX format) and file contents are copied byte for byte, so the result loads like the original.

Only what every engine's docker-archive has is relied on: manifest.json (which names the config
and the layer files), the config and the layers, and "oci-layout" where present. Layer files are
`<v1 id>/layer.tar` (Docker before 25), `blobs/sha256/<digest>` (Docker 25+) or `<diff id>.tar`
(Podman, with `<v1 id>/layer.tar` symlinks to it); the `repositories` file may be absent.
"""
from __future__ import annotations

import hashlib
import io
import json
import os
import tarfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import IO, Protocol, cast

from ..errors import TransferError
from .manifest import Layer, chain_ids

COPY_BLOCK = 1 << 20
# tarfile's read-ahead: a pipe's capacity. With 1 MiB it copies more (measured: benchmarks/tar_stream.py).
READ_AHEAD = 64 << 10
CAPTURE_LIMIT = 64 << 20  # metadata files kept in memory are small; a larger one is not metadata
_BLOCK = 512
_END = bytes(2 * _BLOCK)  # the end-of-archive marker


class Reader(Protocol):
    def read(self, n: int = -1, /) -> bytes: ...


@dataclass
class Member:
    path: str
    size: int
    kind: bytes  # tar type flag: b"0" file, b"2" symlink, b"5" folder, ...
    link: str = ""

    @property
    def regular(self) -> bool:
        return self.kind in tarfile.REGULAR_TYPES


@dataclass
class SaveSummary:
    members: dict[str, Member] = field(default_factory=dict)
    captured: dict[str, bytes] = field(default_factory=dict)
    dropped: dict[str, str] = field(default_factory=dict)  # path -> sha256 of what was left out
    tar_bytes: int = 0
    complete: bool = False  # False when the stream ended before the end-of-archive marker

    @property
    def layout(self) -> str:
        return "oci" if "oci-layout" in self.members else "docker-legacy"


class _Source:
    """The archive as tarfile reads it; remembers whether the stream ran dry."""

    def __init__(self, src: Reader):
        self.src, self.ended = src, False

    def read(self, n: int = -1) -> bytes:
        data = self.src.read(n)
        if not data and n:
            self.ended = True
        return data


def _header_class(summary: SaveSummary) -> type[tarfile.TarInfo]:
    """A TarInfo that notes the end-of-archive marker: tarfile stops quietly at it, and equally
    quietly where a stream breaks off between members, so this is how the two are told apart."""

    class Header(tarfile.TarInfo):
        @classmethod
        def frombuf(cls, buf: bytes | bytearray, encoding: str, errors: str) -> Header:
            if len(buf) == _BLOCK and buf == _END[:_BLOCK]:
                summary.complete = True
            return super().frombuf(buf, encoding, errors)

    return Header


def copy_archive(src: Reader, write: Callable[[bytes], object], *, drop: Callable[[Member], bool],
                 capture: Iterable[str] = (), command: str = "docker save") -> SaveSummary:
    """Copy a tar stream member by member, leaving out the regular files `drop` picks.

    Dropped members are hashed as they pass so the caller can check they were what it thought.
    Members named in `capture` (small metadata files) are also kept in memory. A stream that stops
    early returns with complete=False: the caller learns why from the writer's exit status.
    `command` is what wrote the stream, for the message when it is not a tar archive at all.
    """
    out = SaveSummary()
    source = _Source(src)
    try:
        _copy_members(source, write, drop, set(capture), out)
        # Read what follows the end-of-archive marker (padding) too: the writer then finishes
        # rather than meeting a closed pipe, and a progress counter sees the end.
        while source.read(COPY_BLOCK):
            pass
    except tarfile.ReadError as e:
        out.complete = False
        if not source.ended:
            raise TransferError(f"`{command}` wrote something that is not a tar archive ({e}); "
                                f"check the engine with `{command} IMAGE | tar -t`.") from None
    return out


def _copy_members(source: _Source, write: Callable[[bytes], object], drop: Callable[[Member], bool],
                  wanted: set[str], out: SaveSummary) -> None:
    def emit(data: bytes) -> None:
        out.tar_bytes += len(data)
        write(data)

    # Stream mode ("r|") only ever reads; typeshed's file protocol also asks for write/seek/tell.
    fileobj = cast(IO[bytes], source)
    with tarfile.open(fileobj=fileobj, mode="r|", bufsize=READ_AHEAD, tarinfo=_header_class(out)) as tar:
        for info in tar:
            member = Member(info.name, info.size, info.type, info.linkname)
            out.members[member.path] = member
            has_data = info.isreg() or info.type not in tarfile.SUPPORTED_TYPES
            skip = member.regular and drop(member)
            if not skip:
                header = info if has_data else _without_data(info)
                emit(header.tobuf(tarfile.PAX_FORMAT, "utf-8", "surrogateescape"))
            if not has_data:
                continue
            digest = hashlib.sha256() if skip else None
            parts: list[bytes] | None = [] if member.path in wanted and info.size <= CAPTURE_LIMIT else None
            # extractfile gives an io.BufferedReader; its raw file reads straight from the stream,
            # one copy less per block.
            body = cast(io.BufferedReader, tar.extractfile(info)).raw
            while block := body.read(COPY_BLOCK):
                if digest is not None:
                    digest.update(block)
                else:
                    emit(block)
                if parts is not None:
                    parts.append(block)
            if digest is not None:
                out.dropped[member.path] = "sha256:" + digest.hexdigest()
            elif info.size % _BLOCK:
                emit(bytes(_BLOCK - info.size % _BLOCK))
            if parts is not None:
                out.captured[member.path] = b"".join(parts)
    if out.complete:
        emit(_END)


def _without_data(info: tarfile.TarInfo) -> tarfile.TarInfo:
    """Links and folders carry no data: their header says size 0 whatever the original said."""
    if not info.size:
        return info
    bare = tarfile.TarInfo(info.name)
    bare.type, bare.linkname, bare.mode, bare.mtime = info.type, info.linkname, info.mode, info.mtime
    bare.uid, bare.gid, bare.uname, bare.gname = info.uid, info.gid, info.uname, info.gname
    return bare


# ---------------------------------------------------------------- the layers in it


def looks_like_layer(member: Member) -> bool:
    """A file that may be a layer (the archive's manifest.json, which says for sure, comes last)."""
    return member.path.endswith(".tar") or member.path.startswith("blobs/sha256/")


def layer_records(diff_ids: list[str], summary: SaveSummary, command: str = "docker save") -> list[Layer]:
    """Pair each diff ID with its file in the archive, from the archive's own manifest.json."""
    try:
        paths = json.loads(summary.captured["manifest.json"])[0]["Layers"]
    except (KeyError, IndexError, TypeError, ValueError):
        raise TransferError(f"`{command}` wrote an archive without a readable manifest.json; "
                            "this engine's save format is not supported.") from None
    if len(paths) != len(diff_ids):
        raise TransferError(f"`{command}` listed a different number of layers than the image has; "
                            "run the export again.")
    sizes = {}
    for path, diff_id in zip(paths, diff_ids):
        member = summary.members.get(resolve(path, summary))
        if member is not None and member.regular:
            sizes[diff_id] = member.size
    records = []
    for path, diff_id, chain in zip(paths, diff_ids, chain_ids(diff_ids)):
        digest = f"sha256:{path.rsplit('/', 1)[-1]}" if path.startswith("blobs/sha256/") else diff_id
        records.append(Layer(diff_id=diff_id, chain_id=chain, path=path, size=sizes.get(diff_id, 0),
                             digest=digest, shipped=resolve(path, summary) not in summary.dropped))
    return records


def resolve(path: str, summary: SaveSummary) -> str:
    """The file a layer path really reads: archives symlink a repeated layer (Podman: every layer)."""
    member = summary.members.get(path)
    if member is not None and member.kind == tarfile.SYMTYPE:
        return os.path.normpath(os.path.join(os.path.dirname(path), member.link))
    return path
