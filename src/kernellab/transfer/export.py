"""Export: an engine's image as a bundle folder, full or delta.

The engine's save archive streams through multithreaded zstd into the chunks, under a hidden name
that becomes the bundle's name only when everything is on disk. A delta bundle (`since=` an older
manifest) leaves out the layer files the receiver already has (see `kernellab.transfer`).
"""
from __future__ import annotations

import hashlib
import os
import re
import shutil
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import IO, Any, cast

from .. import __version__
from ..engine import Engine, resolve_engine
from ..errors import CommandError, TransferError
from .chunks import (
    CHUNK_PREFIX,
    DEFAULT_CHUNK_SIZE,
    DEFAULT_LEVEL,
    ChunkWriter,
    Counter,
    Progress,
    check_level,
    compressor,
    parse_size,
)
from .disk import disk_error, fsync_dir, guard, mb, remove_stale_partials
from .manifest import MANIFEST, Delta, ImageInfo, Layer, Manifest, StreamInfo, Tool, chain_ids
from .stream import Member, SaveSummary, copy_archive, layer_records, looks_like_layer, resolve


def export_image(ref: str, out_dir: Path | str, *, chunk_size: int | str = DEFAULT_CHUNK_SIZE,
                 level: int = DEFAULT_LEVEL, since: Path | str | None = None,
                 progress: Progress | None = None, engine: Engine | None = None) -> Path:
    """Write the image REF as a bundle folder inside out_dir; return the bundle's path."""
    chunk_size = parse_size(chunk_size)
    level = check_level(level)
    eng = resolve_engine(engine).require()
    image = eng.must_inspect(ref)
    image_id: str = image["Id"]
    diff_ids: list[str] = (image.get("RootFS") or {}).get("Layers") or []
    tags: list[str] = image.get("RepoTags") or []
    old = Manifest.load(since) if since else None
    omit = _omittable(diff_ids, old, ref) if old else {}  # chain ID -> the old bundle's layer record
    omit_sizes = {layer.size for layer in omit.values()}
    omit_digests = {layer.digest for layer in omit.values()}

    out_dir = Path(out_dir)
    name = _bundle_name(tags, image_id, old)
    final = out_dir / name
    if final.exists():
        raise TransferError(f"{final} already exists; delete it or pass another -o.")
    guard(out_dir, out_dir.mkdir, parents=True, exist_ok=True)
    remove_stale_partials(out_dir, name)
    partial = out_dir / f".{name}.partial-{os.getpid()}"
    estimate = int(image.get("Size") or 0)
    width = max(3, len(str(2 * estimate // chunk_size + 1)))
    keep: set[str] = set()

    def drop(member: Member) -> bool:
        return member.size in omit_sizes and member.path not in keep and looks_like_layer(member)

    try:
        # A layer file is left out when its size and content match one the receiver has; the
        # content is only known once it has passed, so a rare same-size stranger means one retry.
        for _attempt in range(4):
            shutil.rmtree(partial, ignore_errors=True)
            guard(partial, partial.mkdir)
            chunks = ChunkWriter(partial, chunk_size, width)
            summary = _save_into(eng, tags or [image_id], chunks, level, drop,
                                 Counter(None, "export", estimate or None, progress))
            layers = layer_records(diff_ids, summary, _save_command(eng))
            wrong = {p for p, d in summary.dropped.items() if d not in omit_digests}
            # A dropped file must serve only layers the receiver has: the same content can sit
            # both in the shared base and higher up in the new image.
            wrong |= {resolve(r.path, summary) for r in layers if not r.shipped and r.chain_id not in omit}
            if not wrong:
                break
            keep |= wrong
        else:
            raise TransferError("Could not tell the shared layers apart; export without --since.")
        manifest = _manifest(image, tags, layers, old, summary, chunks, level)
        _write_metadata(partial, name, manifest)
        guard(final, os.rename, partial, final)
    except BaseException as e:
        shutil.rmtree(partial, ignore_errors=True)
        if isinstance(e, OSError):
            raise disk_error(e, out_dir, "the export") from None
        raise
    return final


def _save_command(eng: Engine) -> str:
    return " ".join(eng.save_argv([]))


def _save_into(eng: Engine, refs: list[str], chunks: ChunkWriter, level: int, drop: Callable[[Member], bool],
               counter: Counter) -> SaveSummary:
    command = _save_command(eng)
    try:
        with eng.save(refs) as raw:
            counter.src = raw
            with compressor(level).stream_writer(cast(IO[bytes], chunks), closefd=False) as z:
                summary = copy_archive(counter, z.write, drop=drop, capture=[MANIFEST], command=command)
    except CommandError as e:
        chunks.abandon()
        raise TransferError(f"`{command}` failed ({last_line(e)}); no bundle was written.") from None
    except BaseException:
        chunks.abandon()
        raise
    if not summary.complete:
        raise TransferError(f"`{command}` stopped before the end of the archive; run the export again.")
    chunks.close()
    return summary


def last_line(e: CommandError) -> str:
    return (e.tail.strip().splitlines() or [f"exit code {e.returncode}"])[-1]


def _omittable(diff_ids: list[str], old: Manifest, ref: str) -> dict[str, Layer]:
    """Layers of the new image whose whole chain the old image has: chain ID -> the old record."""
    old_layers = {layer.chain_id: layer for layer in old.layers}
    shared = {c: old_layers[c] for c in chain_ids(diff_ids) if c in old_layers}
    if not shared:
        raise TransferError(f"{ref} shares no layers with the image of the --since manifest "
                            f"({old.describe()}); drop --since to write a full bundle.")
    return shared


def _bundle_name(tags: list[str], image_id: str, old: Manifest | None) -> str:
    base = re.sub(r"[^A-Za-z0-9._-]+", "_", tags[0].replace(":", "-")) if tags else "image"
    name = f"{base}-{image_id.split(':')[-1][:12]}"
    if old:
        name += f"-since-{old.image.id.split(':')[-1][:12]}"
    return name


def _manifest(image: dict[str, Any], tags: list[str], layers: list[Layer], old: Manifest | None,
              summary: SaveSummary, chunks: ChunkWriter, level: int) -> Manifest:
    return Manifest(
        image=ImageInfo(id=image["Id"], tags=tags, labels=(image.get("Config") or {}).get("Labels") or {},
                        os=image.get("Os"), architecture=image.get("Architecture"), size=image.get("Size"),
                        layout=summary.layout),
        layers=layers,
        stream=StreamInfo(tar_bytes=summary.tar_bytes, compressed=chunks.total, sha256=chunks.stream.hexdigest(),
                          level=level),
        chunks=chunks.chunks,
        delta=Delta(old.image.id, old.image.tags) if old else None,
        created=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        tool=Tool("kernellab", __version__),
    )


def _write_metadata(folder: Path, name: str, manifest: Manifest) -> None:
    (folder / MANIFEST).write_text(manifest.to_json())
    (folder / "SHA256SUMS").write_text(manifest.sums())
    (folder / "README.txt").write_text(_readme(name, manifest))
    fsync_dir(folder)


def _readme(name: str, m: Manifest) -> str:
    lines = [
        f"kernellab image bundle: {m.describe()}",
        (f"{len(m.chunks)} chunk(s), {mb(m.stream.compressed)} compressed, "
         f"{mb(m.stream.tar_bytes)} unpacked; written {m.created} by kernellab {m.tool.version}."),
        "",
        "Copy the whole folder. If a copy breaks off, import-image names the chunks to copy again.",
    ]
    if m.delta:
        lines += ["", "This is a DELTA bundle: it leaves out the layers of the image it was made against,",
                  f"{m.delta.since} ({', '.join(m.delta.since_tags) or 'untagged'}).",
                  "The receiving Docker engine must already have that image (import its bundle first);",
                  "Podman cannot load a delta bundle (it wants every layer file), so send it the full one."]
    lines += ["", "With kernellab (checks every chunk before anything is loaded):",
              f"    invoke import-image {name}      # into the selected engine (docker or podman)"]
    if not m.delta:
        lines += [f"    invoke import-image {name} --to sif     # Apptainer, no container engine needed",
                  f"    invoke import-image {name} --to sqsh    # enroot (through podman or docker)"]
    lines += ["", "Without kernellab (needs coreutils and zstd):",
              "    sha256sum -c SHA256SUMS",
              f"    cat {CHUNK_PREFIX}* | zstd -d | docker load     # or podman load"]
    if not m.delta:
        lines += [(f"    cat {CHUNK_PREFIX}* | zstd -d > image.tar && "
                   "apptainer build image.sif docker-archive:image.tar")]
    return "\n".join(lines) + "\n"


#: Files beside the image in a bundle (a recipe and its runs): their digests, for `sha256sum -c`.
EXTRA_SUMS = "FILES.SHA256SUMS"


def add_files(bundle: Path, folder: Path) -> None:
    """List every file under folder (inside bundle) in FILES.SHA256SUMS, so the receiver can verify them too."""
    lines = []
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        lines.append(f"{hashlib.sha256(path.read_bytes()).hexdigest()}  {path.relative_to(bundle).as_posix()}\n")
    (bundle / EXTRA_SUMS).write_text("".join(lines))
    with open(bundle / "README.txt", "a") as f:
        f.write(f"\nThe folder {folder.relative_to(bundle)}/ travels with the image; check it with "
                f"`sha256sum -c {EXTRA_SUMS}`.\n")


def verify_files(bundle: Path, chunks: list[str]) -> list[str]:
    """The files beside the image that cannot be trusted: those FILES.SHA256SUMS lists that are missing or differ,
    and any file the bundle holds that is neither the image's (its manifest, sums, README and chunks) nor listed
    there (so a missing list with files beside the image is every such file). [] when all is as sent."""
    sums = bundle / EXTRA_SUMS
    listed: dict[str, str] = {}
    for line in sums.read_text().splitlines() if sums.is_file() else []:
        digest, _, name = line.partition("  ")
        listed[name] = digest
    bad = [name for name, digest in listed.items()
           if not (bundle / name).is_file() or hashlib.sha256((bundle / name).read_bytes()).hexdigest() != digest]
    own = {MANIFEST, "SHA256SUMS", "README.txt", EXTRA_SUMS, *chunks}
    for path in sorted(p for p in bundle.rglob("*") if p.is_file()):
        name = path.relative_to(bundle).as_posix()
        if name not in own and name not in listed:
            bad.append(f"{name} (not in {EXTRA_SUMS})")
    return bad
