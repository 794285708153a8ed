"""Image bundles for machines that cannot pull: chunked, verified chunk by chunk, optionally delta.

A bundle is one folder:

    manifest.json        the image (ID, tags, labels, layers) and the bundle (chunks, digests)
    image.tar.zst.000 …  one zstd stream of the `docker save` archive, cut into fixed-size chunks
    SHA256SUMS           the chunk digests, for `sha256sum -c` where kernellab is not installed
    README.txt           what the receiver runs

Export streams `docker save` through multithreaded zstd into the chunks, so memory stays flat
whatever the image size, and writes under a hidden name that becomes the bundle's name only when
everything is on disk. Import checks every chunk before anything reaches an engine.

A delta bundle (`since=` an older manifest) leaves out the layer files the receiver already has:
`docker load` reads a layer file only when the engine lacks that layer's chain, so a save archive
whose manifest names absent files loads wherever those layers exist (verified on Docker 20.10).
"""
from __future__ import annotations

import errno
import hashlib
import json
import os
import re
import shutil
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import IO, Any, Protocol, cast

import zstandard

from . import __version__, proc, resolve
from .errors import CommandError, DockerError, KernellabError, TransferError

FORMAT = "kernellab-bundle/1"
MANIFEST = "manifest.json"
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


def chain_ids(diff_ids: Iterable[str]) -> list[str]:
    """The engine's layer chain IDs: a layer is identified by its content and everything below it."""
    chains: list[str] = []
    for diff_id in diff_ids:
        chains.append(diff_id if not chains else
                      "sha256:" + hashlib.sha256(f"{chains[-1]} {diff_id}".encode()).hexdigest())
    return chains


# ---------------------------------------------------------------- the engine


def inspect_image(ref: str) -> dict[str, Any]:
    """`docker image inspect REF` as a dict; a missing image is a TransferError."""
    _require_engine()
    result = proc.run(["docker", "image", "inspect", ref], check=False)
    if not result.ok:
        raise TransferError(f"The Docker engine has no image {ref!r}; build it or check `docker images`.")
    return json.loads(result.stdout)[0]


def _engine_answers() -> bool:
    try:
        return proc.run(["docker", "version", "--format", "{{.Server.Version}}"], check=False, timeout=30).ok
    except KernellabError:  # no docker CLI, or it hung
        return False


def _require_engine() -> None:
    if not _engine_answers():
        raise DockerError("No Docker engine answers here (`docker version` failed); start one, or on a "
                          "machine without a daemon import with --to sif (Apptainer) or --to sqsh (enroot).")


def _present_chains() -> set[str]:
    """Chain IDs of every layer the engine's images hold (what a delta bundle may leave out)."""
    ids = sorted(set(proc.run(["docker", "image", "ls", "-aq", "--no-trunc"]).stdout.split()))
    chains: set[str] = set()
    for start in range(0, len(ids), 100):
        for image in json.loads(proc.run(["docker", "image", "inspect", *ids[start:start + 100]]).stdout):
            chains.update(chain_ids(image["RootFS"].get("Layers") or []))
    return chains


# ---------------------------------------------------------------- the save archive, as a stream


class _Reader(Protocol):
    def read(self, n: int = -1, /) -> bytes: ...


@dataclass
class _Member:
    path: str
    size: int
    kind: bytes  # tar type flag: b"0" file, b"2" symlink, b"5" folder, ...
    link: str = ""

    @property
    def regular(self) -> bool:
        return self.kind in (b"0", b"\0", b"7")


@dataclass
class _TarSummary:
    members: dict[str, _Member] = field(default_factory=dict)
    captured: dict[str, bytes] = field(default_factory=dict)
    dropped: dict[str, str] = field(default_factory=dict)  # path -> sha256 of what was left out
    tar_bytes: int = 0
    complete: bool = False  # False when the stream ended before the end-of-archive marker


class _Ended(Exception):
    """The stream stopped early; the writer's exit status says why, so it is not an error here."""


def _read_exact(src: _Reader, n: int) -> bytes:
    data = src.read(n)
    while len(data) < n:
        more = src.read(n - len(data))
        if not more:
            raise _Ended
        data += more
    return data


def _pax(body: bytes) -> dict[str, str]:
    records: dict[str, str] = {}
    while body:
        length = body.partition(b" ")[0]
        if not length.isdigit():
            break
        record, body = body[len(length) + 1:int(length)], body[int(length):]
        key, _, value = record.rstrip(b"\n").partition(b"=")
        records[key.decode()] = value.decode("utf-8", "replace")
    return records


def _octal(field_: bytes) -> int:
    if field_[0] & 0x80:  # base-256, for sizes past 8 GiB in GNU form
        return int.from_bytes(field_[1:], "big")
    try:
        return int(field_.split(b"\0", 1)[0].strip() or b"0", 8)
    except ValueError:
        raise TransferError("`docker save` wrote something that is not a tar archive; "
                            "check the engine with `docker save IMAGE | tar -t`.") from None


def _copy_tar(src: _Reader, write: Callable[[bytes], object], *, drop: Callable[[_Member], bool],
              capture: Iterable[str] = ()) -> _TarSummary:
    """Copy a tar stream block by block, leaving out members `drop` picks; memory stays flat.

    Dropped members are hashed as they pass so the caller can check they were what it thought.
    Members named in `capture` (small metadata files) are also kept in memory. A stream that stops
    early returns with complete=False: the caller learns why from the writer's exit status.
    """
    out = _TarSummary()
    try:
        _copy_members(src, write, drop, set(capture), out)
    except _Ended:
        pass
    return out


def _copy_members(src: _Reader, write: Callable[[bytes], object], drop: Callable[[_Member], bool],
                  wanted: set[str], out: _TarSummary) -> None:
    pending: list[bytes] = []  # extended headers that belong to the next member
    extra: dict[str, str] = {}

    def emit(data: bytes) -> None:
        out.tar_bytes += len(data)
        write(data)

    while True:
        header = _read_exact(src, 512)
        if header == bytes(512):  # end of archive: pass it and any trailing padding through
            for block in [*pending, header]:
                emit(block)
            for block in iter(lambda: src.read(COPY_BLOCK), b""):
                emit(block)
            out.complete = True
            return
        kind = header[156:157]
        size = _octal(header[124:136])
        padding = -size % 512
        if kind in (b"x", b"L", b"K"):  # PAX or GNU long-name records describe the next member
            if size > 1 << 20:
                raise TransferError("The image archive has an implausible tar header; run the export again.")
            body = _read_exact(src, size + padding)
            if kind == b"x":
                extra.update(_pax(body[:size]))
            else:
                extra["path" if kind == b"L" else "linkpath"] = body[:size].rstrip(b"\0").decode()
            pending.append(header + body)
            continue
        name = header[:100].rstrip(b"\0").decode()
        prefix = header[345:500].rstrip(b"\0").decode() if header[257:262] == b"ustar" else ""
        member = _Member(
            path=extra.get("path") or (f"{prefix}/{name}" if prefix else name),
            size=int(extra.get("size", size)),
            kind=kind,
            link=extra.get("linkpath") or header[157:257].rstrip(b"\0").decode(),
        )
        size, padding = member.size, -member.size % 512
        out.members[member.path] = member
        skip = member.regular and drop(member)
        if not skip:
            for block in [*pending, header]:
                emit(block)
        pending, extra = [], {}
        digest = hashlib.sha256() if skip else None
        body_parts: list[bytes] | None = [] if member.path in wanted and size <= 64 << 20 else None
        left = size
        while left:
            block = src.read(min(left, COPY_BLOCK))
            if not block:
                raise _Ended
            left -= len(block)
            if digest is not None:
                digest.update(block)
            else:
                emit(block)
            if body_parts is not None:
                body_parts.append(block)
        tail = _read_exact(src, padding) if padding else b""
        if digest is not None:
            out.dropped[member.path] = "sha256:" + digest.hexdigest()
        elif tail:
            emit(tail)
        if body_parts is not None:
            out.captured[member.path] = b"".join(body_parts)


def _looks_like_layer(member: _Member) -> bool:
    return member.path.endswith("/layer.tar") or member.path.startswith("blobs/sha256/")


def _layer_records(diff_ids: list[str], summary: _TarSummary) -> list[dict[str, Any]]:
    """Pair each diffID with its file in the archive, from the archive's own manifest.json.

    Legacy layout (Docker < 25): `<v1 id>/layer.tar`, whose sha256 is the diffID. OCI layout
    (Docker 25+): `blobs/sha256/<digest>`, named by its digest.
    """
    try:
        paths = json.loads(summary.captured["manifest.json"])[0]["Layers"]
    except (KeyError, IndexError, ValueError):
        raise TransferError("`docker save` wrote an archive without a readable manifest.json; "
                            "this engine's save format is not supported.") from None
    if len(paths) != len(diff_ids):
        raise TransferError("`docker save` listed a different number of layers than the image has; "
                            "run the export again.")
    sizes = {}
    for path, diff_id in zip(paths, diff_ids):
        member = summary.members.get(path)
        if member is not None and member.regular:
            sizes[diff_id] = member.size
    records = []
    for path, diff_id, chain in zip(paths, diff_ids, chain_ids(diff_ids)):
        digest = f"sha256:{path.rsplit('/', 1)[-1]}" if path.startswith("blobs/sha256/") else diff_id
        records.append({"diff_id": diff_id, "chain_id": chain, "path": path, "size": sizes.get(diff_id, 0),
                        "digest": digest, "shipped": _resolve(path, summary) not in summary.dropped})
    return records


def _resolve(path: str, summary: _TarSummary) -> str:
    """The file a layer path really reads: the legacy layout symlinks a repeated layer to its first copy."""
    member = summary.members.get(path)
    if member is not None and member.kind == b"2":
        return os.path.normpath(os.path.join(os.path.dirname(path), member.link))
    return path


# ---------------------------------------------------------------- chunks


class _ChunkWriter:
    """A write-only stream cut into fixed-size files, each with its sha256."""

    def __init__(self, folder: Path, chunk_size: int, width: int):
        self.folder, self.chunk_size, self.width = folder, chunk_size, width
        self.chunks: list[dict[str, Any]] = []
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
                self._file = open(self.folder / name, "wb")  # noqa: SIM115 (open across writes)
                self.chunks.append({"name": name})
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
        self.chunks[-1].update(size=self._size, sha256=self._hash.hexdigest())
        self._file, self._hash, self._size = None, hashlib.sha256(), 0

    def close(self) -> None:
        if self._file is not None:
            self._seal()

    def abandon(self) -> None:
        """Close the open file of a failed stream; the caller removes the folder."""
        if self._file is not None:
            self._file.close()
            self._file = None


class _Counter:
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


# ---------------------------------------------------------------- export


def export_image(ref: str, out_dir: Path | str, *, chunk_size: int | str = DEFAULT_CHUNK_SIZE,
                 level: int = DEFAULT_LEVEL, since: Path | str | None = None,
                 progress: Progress | None = None) -> Path:
    """Write the image REF as a bundle folder inside out_dir; return the bundle's path."""
    chunk_size = parse_size(chunk_size)
    if not 1 <= int(level) <= 22:
        raise TransferError(f"zstd level {level} is out of range; pick 1 (fastest) to 22 (smallest), 3 is the default.")
    image = inspect_image(ref)
    image_id: str = image["Id"]
    diff_ids: list[str] = image["RootFS"].get("Layers") or []
    tags: list[str] = image.get("RepoTags") or []
    old = read_manifest(_manifest_path(Path(since))) if since else None
    omit = _omittable(diff_ids, old, ref) if old else {}  # chain ID -> the old bundle's layer record
    omit_sizes = {layer["size"] for layer in omit.values()}
    omit_digests = {layer["digest"] for layer in omit.values()}

    out_dir = Path(out_dir)
    name = _bundle_name(tags, image_id, old)
    final = out_dir / name
    if final.exists():
        raise TransferError(f"{final} already exists; delete it or pass another -o.")
    _guard(out_dir, out_dir.mkdir, parents=True, exist_ok=True)
    _remove_stale_partials(out_dir, name)
    partial = out_dir / f".{name}.partial-{os.getpid()}"
    estimate = int(image.get("Size") or 0)
    width = max(3, len(str(2 * estimate // chunk_size + 1)))
    keep: set[str] = set()

    def drop(member: _Member) -> bool:
        return member.size in omit_sizes and member.path not in keep and _looks_like_layer(member)

    try:
        # A layer file is left out when its size and content match one the receiver has; the
        # content is only known once it has passed, so a rare same-size stranger means one retry.
        for _attempt in range(4):
            shutil.rmtree(partial, ignore_errors=True)
            _guard(partial, partial.mkdir)
            chunks = _ChunkWriter(partial, chunk_size, width)
            summary = _save_into(tags or [image_id], chunks, int(level), drop,
                                 _Counter(None, "export", estimate or None, progress))
            layers = _layer_records(diff_ids, summary)
            wrong = {p for p, d in summary.dropped.items() if d not in omit_digests}
            # A dropped file must serve only layers the receiver has: the same content can sit
            # both in the shared base and higher up in the new image.
            wrong |= {_resolve(r["path"], summary) for r in layers
                      if not r["shipped"] and r["chain_id"] not in omit}
            if not wrong:
                break
            keep |= wrong
        else:
            raise TransferError("Could not tell the shared layers apart; export without --since.")
        manifest = _manifest(image, tags, layers, old, summary, chunks, int(level))
        _write_metadata(partial, name, manifest)
        _guard(final, os.rename, partial, final)
    except BaseException as e:
        shutil.rmtree(partial, ignore_errors=True)
        if isinstance(e, OSError):
            raise _disk_error(e, out_dir, "the export") from None
        raise
    return final


def _save_into(refs: list[str], chunks: _ChunkWriter, level: int, drop: Callable[[_Member], bool],
               counter: _Counter) -> _TarSummary:
    params = zstandard.ZstdCompressionParameters.from_level(level, threads=-1, job_size=JOB_SIZE, write_checksum=1)
    compressor = zstandard.ZstdCompressor(compression_params=params)
    try:
        with proc.pipe_from(["docker", "save", *refs]) as raw:
            counter.src = raw
            with compressor.stream_writer(cast(IO[bytes], chunks), closefd=False) as z:
                summary = _copy_tar(counter, z.write, drop=drop, capture=["manifest.json"])
    except CommandError as e:
        chunks.abandon()
        raise TransferError(f"`docker save` failed ({_last_line(e)}); no bundle was written.") from None
    except BaseException:
        chunks.abandon()
        raise
    if not summary.complete:
        raise TransferError("`docker save` stopped before the end of the archive; run the export again.")
    chunks.close()
    return summary


def _last_line(e: CommandError) -> str:
    return (e.tail.strip().splitlines() or [f"exit code {e.returncode}"])[-1]


def _omittable(diff_ids: list[str], old: dict[str, Any], ref: str) -> dict[str, dict[str, Any]]:
    """Layers of the new image whose whole chain the old image has: chain ID -> the old record."""
    old_layers = {layer["chain_id"]: layer for layer in old["layers"]}
    shared = {c: old_layers[c] for c in chain_ids(diff_ids) if c in old_layers}
    if not shared:
        raise TransferError(f"{ref} shares no layers with the image of the --since manifest "
                            f"({_describe(old)}); drop --since to write a full bundle.")
    return shared


def _bundle_name(tags: list[str], image_id: str, old: dict[str, Any] | None) -> str:
    base = re.sub(r"[^A-Za-z0-9._-]+", "_", tags[0].replace(":", "-")) if tags else "image"
    name = f"{base}-{image_id.split(':')[-1][:12]}"
    if old:
        name += f"-since-{old['image']['id'].split(':')[-1][:12]}"
    return name


def _remove_stale_partials(out_dir: Path, name: str) -> None:
    """Remove what an export killed without a chance to clean up (e.g. SIGKILL) left behind."""
    for stale in out_dir.glob(f".{name}.partial-*"):
        pid = stale.name.rsplit("-", 1)[-1]
        if pid.isdigit() and not _alive(int(pid)):
            shutil.rmtree(stale, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _manifest(image: dict[str, Any], tags: list[str], layers: list[dict[str, Any]],
              old: dict[str, Any] | None, summary: _TarSummary, chunks: _ChunkWriter,
              level: int) -> dict[str, Any]:
    layout = "oci" if "oci-layout" in summary.members else "docker-legacy"
    return {
        "format": FORMAT,
        "tool": {"name": "kernellab", "version": __version__},
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "image": {
            "id": image["Id"],
            "tags": tags,
            "labels": (image.get("Config") or {}).get("Labels") or {},
            "os": image.get("Os"),
            "architecture": image.get("Architecture"),
            "size": image.get("Size"),
            "layout": layout,
        },
        "layers": layers,
        "delta": None if not old else {
            "since": old["image"]["id"],
            "since_tags": old["image"]["tags"],
        },
        "stream": {"compression": "zstd", "level": level, "tar_bytes": summary.tar_bytes,
                   "bytes": chunks.total, "sha256": chunks.stream.hexdigest()},
        "chunks": chunks.chunks,
    }


def _write_metadata(folder: Path, name: str, manifest: dict[str, Any]) -> None:
    (folder / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
    (folder / "SHA256SUMS").write_text(_sums(manifest))
    (folder / "README.txt").write_text(_readme(name, manifest))
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _readme(name: str, m: dict[str, Any]) -> str:
    delta = m["delta"]
    lines = [
        f"kernellab image bundle: {_describe(m)}",
        (f"{len(m['chunks'])} chunk(s), {_mb(m['stream']['bytes'])} compressed, "
         f"{_mb(m['stream']['tar_bytes'])} unpacked; written {m['created']} by kernellab {m['tool']['version']}."),
        "",
        "Copy the whole folder. If a copy breaks off, import-image names the chunks to copy again.",
    ]
    if delta:
        lines += ["", "This is a DELTA bundle: it leaves out the layers of the image it was made against,",
                  f"{delta['since']} ({', '.join(delta['since_tags']) or 'untagged'}).",
                  "The receiving Docker engine must already have that image (import its bundle first)."]
    lines += ["", "With kernellab (checks every chunk before anything is loaded):",
              f"    invoke import-image {name}"]
    if not delta:
        lines += [f"    invoke import-image {name} --to sif     # Apptainer, no Docker daemon needed",
                  f"    invoke import-image {name} --to sqsh    # enroot (through podman or docker)"]
    lines += ["", "Without kernellab (needs coreutils and zstd):",
              "    sha256sum -c SHA256SUMS",
              f"    cat {CHUNK_PREFIX}* | zstd -d | docker load"]
    if not delta:
        lines += [(f"    cat {CHUNK_PREFIX}* | zstd -d > image.tar && "
                   "apptainer build image.sif docker-archive:image.tar")]
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------- reading and verifying


def _manifest_path(path: Path) -> Path:
    return path / MANIFEST if path.is_dir() else path


def read_manifest(path: Path | str) -> dict[str, Any]:
    """The manifest of a bundle folder (or a manifest.json path), checked for the fields import needs."""
    path = _manifest_path(Path(path))
    try:
        manifest = json.loads(path.read_text())
    except FileNotFoundError:
        raise TransferError(f"{path} does not exist; point at a bundle folder or its manifest.json.") from None
    except (OSError, ValueError) as e:
        raise TransferError(f"{path} is not a readable manifest ({e}); copy it again from the sender.") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise TransferError(f"{path} is not a {FORMAT} manifest; export the bundle again with this kernellab.")
    for key in ("image", "layers", "chunks", "stream"):
        if key not in manifest:
            raise TransferError(f"{path} lacks {key!r}; copy it again from the sender.")
    return manifest


def verify_bundle(bundle: Path | str, progress: Progress | None = None) -> dict[str, Any]:
    """Check every chunk against the manifest; name each missing, truncated or corrupt chunk."""
    bundle = Path(bundle)
    manifest = read_manifest(bundle)
    chunks = manifest["chunks"]
    total = sum(c["size"] for c in chunks)
    done = 0
    stream = hashlib.sha256()
    bad: list[str] = []
    for chunk in chunks:
        path = bundle / chunk["name"]
        if not path.is_file():
            bad.append(f"{chunk['name']} (missing)")
            continue
        size = path.stat().st_size
        if size != chunk["size"]:
            bad.append(f"{chunk['name']} ({'truncated' if size < chunk['size'] else 'too long'}: "
                       f"{size} of {chunk['size']} bytes)")
            continue
        digest = hashlib.sha256()
        for block in _blocks(path):
            digest.update(block)
            stream.update(block)
            done += len(block)
            if progress:
                progress("verify", done, total)
        if digest.hexdigest() != chunk["sha256"]:
            bad.append(f"{chunk['name']} (corrupt: sha256 differs)")
    if bad and len(bad) == len(chunks) and _foreign(bundle, manifest):
        raise TransferError(f"No chunk in {bundle} matches its manifest.json, which describes "
                            f"{_describe(manifest)}: the manifest belongs to another bundle; copy the "
                            "bundle folder again as a whole; nothing was loaded.")
    if bad:
        shown = ", ".join(bad[:6]) + (f" and {len(bad) - 6} more" if len(bad) > 6 else "")
        raise TransferError(f"{len(bad)} of {len(chunks)} chunks in {bundle} are bad: {shown}; "
                            "copy those files again from the sender and rerun; nothing was loaded.")
    if stream.hexdigest() != manifest["stream"]["sha256"]:
        raise TransferError(f"The chunks of {bundle} are each intact but do not add up to the exported stream; "
                            "copy the bundle folder again as a whole; nothing was loaded.")
    return manifest


def _foreign(bundle: Path, manifest: dict[str, Any]) -> bool:
    """Whether chunk files are there but are not the ones the manifest describes (a mixed-up copy)."""
    present = {p.name for p in bundle.glob(CHUNK_PREFIX + "*")}
    listed = {c["name"] for c in manifest["chunks"]}
    sums = bundle / "SHA256SUMS"
    # One damaged chunk of a one-chunk bundle looks the same as a foreign one: call that damage.
    return bool(present) and (present != listed or len(listed) > 1
                              or (sums.is_file() and sums.read_text() != _sums(manifest)))


def _sums(manifest: dict[str, Any]) -> str:
    return "".join(f"{c['sha256']}  {c['name']}\n" for c in manifest["chunks"])


def _blocks(path: Path) -> Iterator[bytes]:
    with open(path, "rb") as f:
        yield from iter(lambda: f.read(COPY_BLOCK), b"")


def _describe(manifest: Mapping[str, Any]) -> str:
    image = manifest["image"]
    return f"{', '.join(image.get('tags') or []) or 'untagged'} ({image['id'][:19]})"


def _mb(n: int) -> str:
    return f"{n / 1e6:,.1f} MB"


# ---------------------------------------------------------------- import


@dataclass
class ImportResult:
    image_id: str
    tags: list[str]
    output: Path | None  # the .sif or .sqsh file when converting
    tar_bytes: int
    seconds: float


def import_bundle(bundle: Path | str, *, to: str | None = None, output: Path | str | None = None,
                  progress: Progress | None = None) -> ImportResult:
    """Verify a bundle, then load it into Docker (to=None) or convert it (to="sif" or "sqsh")."""
    start = time.monotonic()
    bundle = Path(bundle)
    plans = {None: _docker_plan, "docker": _docker_plan, "sif": _sif_plan, "sqsh": _sqsh_plan}
    if to not in plans:
        raise TransferError(f"--to {to} is not known; use sif (Apptainer) or sqsh (enroot), or leave it out for Docker.")
    manifest = read_manifest(bundle)
    # Tools, layers and disk space are checked first: a refusal should not cost a verification pass.
    finish = plans[to](bundle, manifest, output)
    verify_bundle(bundle, progress)
    out = finish(progress)
    image = manifest["image"]
    return ImportResult(image["id"], image["tags"], out, manifest["stream"]["tar_bytes"], time.monotonic() - start)


_Finish = Callable[["Progress | None"], "Path | None"]


def _docker_plan(bundle: Path, manifest: dict[str, Any], output: Path | str | None) -> _Finish:
    _require_engine()
    _check_delta(manifest)

    def finish(progress: Progress | None) -> None:
        _load_into_docker(bundle, manifest, progress)

    return finish


def _check_delta(manifest: dict[str, Any]) -> None:
    needed = [layer for layer in manifest["layers"] if not layer["shipped"]]
    if not needed:
        return
    have = _present_chains()
    missing = [layer for layer in needed if layer["chain_id"] not in have]
    if missing:
        delta = manifest["delta"] or {}
        since = ", ".join(delta.get("since_tags") or []) or delta.get("since", "its base image")
        raise TransferError(f"This delta bundle leaves out {len(missing)} layer(s) this engine lacks "
                            f"(first: {missing[0]['diff_id'][:19]}); import the bundle of {since} first, "
                            "or ask the sender for a full bundle; nothing was loaded.")


def _load_into_docker(bundle: Path, manifest: dict[str, Any], progress: Progress | None) -> None:
    image = manifest["image"]
    _stream_into(["docker", "load"], bundle, manifest, progress,
                 "nothing was loaded or tagged; free space in the engine's data root (`docker info`) and rerun")
    loaded = proc.run(["docker", "image", "inspect", "--format", "{{.Id}}", image["id"]], check=False)
    if not loaded.ok or loaded.stdout.strip() != image["id"]:
        raise TransferError(f"`docker load` finished but the engine has no image {image['id'][:19]}; "
                            "the bundle does not hold what its manifest says, so export it again.")
    for tag in image["tags"]:
        proc.run(["docker", "tag", image["id"], tag])


def _stream_into(argv: list[str], bundle: Path, manifest: dict[str, Any], progress: Progress | None,
                 remedy: str) -> None:
    """Decompress the chunks into a loading command's stdin; its failure becomes a TransferError."""
    try:
        with proc.pipe_to(argv) as pipe:
            try:
                _decompress(bundle, manifest, _FdSink(pipe.stream.fileno()), progress)
            except BrokenPipeError:
                pass  # the loader stopped reading; its exit code and message follow when it is waited on
    except CommandError as e:
        raise TransferError(f"`{' '.join(argv)}` failed ({_last_line(e)}); {remedy}.") from None


class _FdSink:
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


def _decompress(bundle: Path, manifest: dict[str, Any], sink: Any, progress: Progress | None) -> None:
    # Chunks are hashed again as they are read: a file changed since verification stops the load.
    total = manifest["stream"]["bytes"]
    done = 0
    with zstandard.ZstdDecompressor().stream_writer(sink, closefd=False) as z:
        for chunk in manifest["chunks"]:
            digest = hashlib.sha256()
            for block in _blocks(bundle / chunk["name"]):
                digest.update(block)
                z.write(block)
                done += len(block)
                if progress:
                    progress("import", done, total)
            if digest.hexdigest() != chunk["sha256"]:
                raise TransferError(f"{chunk['name']} changed while it was being read; copy it again and rerun.")


def _output_file(bundle: Path, output: Path | str | None, suffix: str) -> Path:
    out = Path(output) if output else Path.cwd() / f"{bundle.resolve().name}.{suffix}"
    if out.exists():
        raise TransferError(f"{out} already exists; delete it or pass another --output.")
    return out


def _require_full(manifest: dict[str, Any], what: str) -> None:
    if not all(layer["shipped"] for layer in manifest["layers"]):
        raise TransferError(f"A delta bundle cannot become {what}: it lacks its base layers; "
                            "convert the full bundle, or load this one into the Docker engine that has them.")


def _sif_plan(bundle: Path, manifest: dict[str, Any], output: Path | str | None) -> _Finish:
    _require_full(manifest, "a SIF file")
    tool = proc.which("apptainer") or proc.which("singularity")
    if not tool:
        raise TransferError("Neither apptainer nor singularity is installed here; install Apptainer "
                            "(apptainer.org, or `module load apptainer` on a cluster) and rerun.")
    out = _output_file(bundle, output, "sif")
    _guard(out.parent, out.parent.mkdir, parents=True, exist_ok=True)
    need = manifest["stream"]["tar_bytes"] * 2  # the unpacked archive, then the SIF beside it
    free = shutil.disk_usage(out.parent).free
    if free < need:
        raise TransferError(f"Converting needs about {_mb(need)} free in {out.parent} and it has "
                            f"{_mb(free)}; free space or pass --output on a larger disk.")

    def finish(progress: Progress | None) -> Path:
        tar = out.parent / f".{out.name}.tar.partial-{os.getpid()}"
        part = out.parent / f".{out.name}.partial-{os.getpid()}.sif"
        try:
            with open(tar, "wb") as f:
                _decompress(bundle, manifest, f, progress)
            proc.run([tool, "build", str(part), f"docker-archive:{tar}"], stream=True)
            os.rename(part, out)
        except OSError as e:
            raise _disk_error(e, out.parent, "the conversion") from None
        finally:
            tar.unlink(missing_ok=True)
            part.unlink(missing_ok=True)
        return out

    return finish


def _sqsh_plan(bundle: Path, manifest: dict[str, Any], output: Path | str | None) -> _Finish:
    if not proc.which("enroot"):
        raise TransferError("enroot is not installed here; install it (github.com/NVIDIA/enroot, or "
                            "`module load enroot` on a cluster) and rerun.")
    out = _output_file(bundle, output, "sqsh")
    image = manifest["image"]
    ref = image["tags"][0] if image["tags"] else image["id"].split(":")[-1]
    # enroot reads images only through an engine: Docker if one answers, else daemonless podman.
    if _engine_answers():
        engine = "dockerd"
        _check_delta(manifest)
    elif proc.which("podman"):
        engine = "podman"
        _require_full(manifest, "an enroot image through podman")
    else:
        raise TransferError("enroot imports through Docker or Podman and neither runs here; install "
                            "podman (daemonless) and rerun.")

    def finish(progress: Progress | None) -> Path:
        if engine == "dockerd":
            _load_into_docker(bundle, manifest, progress)
        else:
            _stream_into(["podman", "load"], bundle, manifest, progress, "nothing was converted")
        part = out.parent / f".{out.name}.partial-{os.getpid()}"
        try:
            proc.run(["enroot", "import", "-o", str(part), f"{engine}://{ref}"], stream=True)
            os.rename(part, out)
        except OSError as e:
            raise _disk_error(e, out.parent, "the conversion") from None
        finally:
            part.unlink(missing_ok=True)
        return out

    return finish


# ---------------------------------------------------------------- the receiving machine


@dataclass
class Finding:
    severity: str  # "warning" or "info"
    message: str


def load_fingerprint(path: Path | str) -> dict[str, Any]:
    """The JSON that `invoke doctor --json` printed on the receiving machine."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError) as e:
        raise TransferError(f"Cannot read the fingerprint {path} ({e}); save `invoke doctor --json` "
                            "from the receiving machine into a file and pass that.") from None
    if not isinstance(data, dict) or "gpus" not in data or "driver" not in data:
        raise TransferError(f"{path} is not a doctor fingerprint (no 'driver'/'gpus'); "
                            "save `invoke doctor --json` from the receiving machine and pass that.")
    return data


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(p) for p in re.findall(r"\d+", str(text)))


def covers(arch_list: str, capability: str) -> bool:
    """Whether kernels built for an image's arch-list label run on a GPU of this compute capability."""
    return resolve.covers(re.split(r"[;\s,]+", arch_list.strip()), capability)


def check_target(labels: Mapping[str, str], fingerprint: Mapping[str, Any]) -> list[Finding]:
    """Warnings for shipping an image with these labels to the machine of this fingerprint."""
    findings: list[Finding] = []
    cuda = labels.get("kernellab.cuda")
    driver = fingerprint.get("driver")
    gpus = fingerprint.get("gpus") or []
    if cuda == "none":
        return [Finding("info", "The image is CPU-only (kernellab.cuda=none); its GPUs will not be used.")]
    if not driver:
        findings.append(Finding("warning", "The receiving machine reports no NVIDIA driver; CUDA code in the "
                                           "image will not run there until one is installed."))
    min_driver = labels.get("kernellab.min-driver")
    if not min_driver:
        findings.append(Finding("info", "The image has no kernellab.min-driver label; the driver was not checked."))
    elif driver and _version(driver) < _version(min_driver):
        findings.append(Finding("warning", f"The receiving driver {driver} is older than {min_driver}, which "
                                           f"CUDA {cuda or '?'} in the image needs; upgrade the driver there or "
                                           "ship a target with an older CUDA."))
    arch_list = labels.get("kernellab.arch-list")
    if not arch_list:
        findings.append(Finding("info", "The image has no kernellab.arch-list label; GPU coverage was not checked."))
    else:
        for i, gpu in enumerate(gpus):
            cc = str(gpu.get("compute_capability", ""))
            if not covers(arch_list, cc):
                findings.append(Finding(
                    "warning", f"GPU {i} ({gpu.get('name', '?')}, compute capability {cc}) is not covered by "
                               f"the image's arch list {arch_list!r}: kernels would fail with 'no kernel image "
                               f"is available'; add {cc} to the target's arch list and rebuild."))
    return findings


# ---------------------------------------------------------------- helpers


def _guard(where: Path, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """fn(*args, **kwargs), with a file system failure said as what to do next."""
    try:
        return fn(*args, **kwargs)
    except OSError as e:
        raise _disk_error(e, where, "writing") from None


def _disk_error(e: OSError, where: Path, what: str) -> TransferError:
    if e.errno in (errno.ENOSPC, errno.EDQUOT):
        return TransferError(f"The disk holding {where} filled up during {what}; nothing was kept there — "
                             "free space or pass another folder and run it again.")
    return TransferError(f"Cannot write in {where} ({e.strerror or e}); pass a folder you can write to.")
