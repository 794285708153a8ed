"""Image bundles for machines that cannot pull: chunked, verified chunk by chunk, optionally delta.

A bundle is one folder:

    manifest.json        the image (ID, tags, labels, layers) and the bundle (chunks, digests)
    image.tar.zst.000 …  one zstd stream of the engine's save archive, cut into fixed-size chunks
    SHA256SUMS           the chunk digests, for `sha256sum -c` where kernellab is not installed
    README.txt           what the receiver runs

Export streams the engine's save archive (Docker or Podman, docker-archive layout) through
multithreaded zstd into the chunks, so memory stays flat whatever the image size, and writes under
a hidden name that becomes the bundle's name only when everything is on disk. Import checks every
chunk before anything reaches an engine.

A delta bundle (`since=` an older manifest) leaves out the layer files the receiver already has:
`docker load` reads a layer file only when the engine lacks that layer's chain, so a save archive
whose manifest names absent files loads wherever those layers exist (verified on Docker 20.10;
Podman 4.3 refuses such archives, so delta bundles load into Docker only).

Modules: `manifest` (the typed manifest.json), `stream` (the save archive as a tar stream),
`chunks` (chunk files, checksums, zstd), `export`, `importers` (by `--to`), `receiver` (can the
receiving machine run the image), `disk` (partial files, free space).
"""
from __future__ import annotations

from .chunks import CHUNK_PREFIX, DEFAULT_CHUNK_SIZE, DEFAULT_LEVEL, Progress, parse_size, verify_bundle
from .export import export_image
from .importers import IMPORTERS, ImportResult, import_bundle
from .manifest import FORMAT, MANIFEST, Chunk, Delta, ImageInfo, Layer, Manifest, StreamInfo, chain_ids, read_manifest
from .receiver import Finding, check_target, covers, load_fingerprint
from .stream import Member, SaveSummary, copy_archive

__all__ = [
    "CHUNK_PREFIX", "DEFAULT_CHUNK_SIZE", "DEFAULT_LEVEL", "FORMAT", "IMPORTERS", "MANIFEST", "Chunk", "Delta",
    "Finding", "ImageInfo", "ImportResult", "Layer", "Manifest", "Member", "Progress", "SaveSummary", "StreamInfo",
    "chain_ids", "check_target", "copy_archive", "covers", "export_image", "import_bundle", "load_fingerprint",
    "parse_size", "read_manifest", "verify_bundle",
]
