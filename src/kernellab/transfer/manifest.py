"""The bundle's manifest.json as typed records: what image it holds, which layers it ships, its chunks.

The JSON format is `kernellab-bundle/1`, unchanged since the first bundles: `Manifest.from_dict`
reads what any earlier kernellab wrote and `to_dict` writes the same keys. Fields that import does
not need have defaults, so an older or hand-trimmed manifest still loads; fields it does need are
checked here, once, so the rest of the code reads attributes instead of guarding dict lookups.
"""
from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import __version__
from ..errors import TransferError

FORMAT = "kernellab-bundle/1"
MANIFEST = "manifest.json"

_REQUIRED: Any = object()


def chain_ids(diff_ids: Iterable[str]) -> list[str]:
    """The engine's layer chain IDs: a layer is identified by its content and everything below it."""
    chains: list[str] = []
    for diff_id in diff_ids:
        chains.append(diff_id if not chains else
                      "sha256:" + hashlib.sha256(f"{chains[-1]} {diff_id}".encode()).hexdigest())
    return chains


class _Fields:
    """Typed reads from one JSON object; a wrong or missing field is one TransferError naming it."""

    def __init__(self, data: Any, where: str, source: Path | str):
        if not isinstance(data, Mapping):
            raise TransferError(f"{source} has an invalid {where} (not an object); copy it again from the sender.")
        self.data, self.where, self.source = data, where, source

    def name(self, key: str) -> str:
        return f"{self.where}.{key}" if self.where else key

    def get(self, key: str, kind: type | tuple[type, ...], default: Any = _REQUIRED) -> Any:
        value = self.data.get(key, default)
        if value is _REQUIRED:
            raise TransferError(f"{self.source} lacks {self.name(key)}; copy it again from the sender.")
        if value is not default and (not isinstance(value, kind) or isinstance(value, bool) and kind is int):
            raise TransferError(f"{self.source} has an invalid {self.name(key)} ({value!r}); "
                                "copy it again from the sender.")
        return value

    def objects(self, key: str) -> list[_Fields]:
        return [_Fields(item, f"{self.name(key)}[{i}]", self.source) for i, item in enumerate(self.get(key, list))]

    def strings(self, key: str) -> list[str]:
        values: list[Any] = self.get(key, list, [])
        if not all(isinstance(v, str) for v in values):
            raise TransferError(f"{self.source} has an invalid {self.name(key)}; copy it again from the sender.")
        return list(values)


@dataclass
class Tool:
    name: str = "kernellab"
    version: str = __version__


@dataclass
class ImageInfo:
    id: str  # "sha256:<hex>", the config digest: the same on every engine
    tags: list[str] = field(default_factory=list)
    labels: dict[str, str] = field(default_factory=dict)
    os: str | None = None
    architecture: str | None = None
    size: int | None = None
    layout: str = "docker-legacy"  # "oci" when the save archive had an oci-layout file

    @classmethod
    def read(cls, f: _Fields) -> ImageInfo:
        labels = f.get("labels", dict, {})
        return cls(f.get("id", str), f.strings("tags"), {str(k): str(v) for k, v in labels.items()},
                   f.get("os", (str, type(None)), None), f.get("architecture", (str, type(None)), None),
                   f.get("size", (int, type(None)), None), f.get("layout", str, "docker-legacy"))


@dataclass
class Layer:
    diff_id: str
    chain_id: str
    path: str = ""          # the layer's file in the save archive
    size: int = 0
    digest: str = ""        # sha256 of that file (the diff ID for uncompressed layers)
    shipped: bool = True    # False: a delta bundle left it out, the receiver must have it

    @classmethod
    def read(cls, f: _Fields) -> Layer:
        diff_id = f.get("diff_id", str)
        return cls(diff_id, f.get("chain_id", str), f.get("path", str, ""), f.get("size", int, 0),
                   f.get("digest", str, diff_id), f.get("shipped", bool))


@dataclass
class Delta:
    since: str                      # the image ID the receiver must already have
    since_tags: list[str] = field(default_factory=list)

    @classmethod
    def read(cls, f: _Fields) -> Delta:
        return cls(f.get("since", str), f.strings("since_tags"))


@dataclass
class StreamInfo:
    """The zstd stream of the save archive that the chunks cut up."""

    tar_bytes: int                  # the archive, uncompressed
    compressed: int                 # the stream: every chunk together ("bytes" on disk)
    sha256: str = ""
    compression: str = "zstd"
    level: int = 3

    @classmethod
    def read(cls, f: _Fields) -> StreamInfo:
        return cls(f.get("tar_bytes", int), f.get("bytes", int), f.get("sha256", str, ""),
                   f.get("compression", str, "zstd"), f.get("level", int, 3))

    def to_dict(self) -> dict[str, Any]:
        return {"compression": self.compression, "level": self.level, "tar_bytes": self.tar_bytes,
                "bytes": self.compressed, "sha256": self.sha256}


@dataclass
class Chunk:
    name: str
    size: int = 0
    sha256: str = ""

    @classmethod
    def read(cls, f: _Fields) -> Chunk:
        name = f.get("name", str)
        if "/" in name or name.startswith("."):
            raise TransferError(f"{f.source} names a chunk {name!r} outside the bundle folder; "
                                "copy it again from the sender.")
        return cls(name, f.get("size", int), f.get("sha256", str))


@dataclass
class Manifest:
    image: ImageInfo
    layers: list[Layer]
    stream: StreamInfo
    chunks: list[Chunk]
    delta: Delta | None = None
    created: str = ""
    tool: Tool = field(default_factory=Tool)
    format: str = FORMAT

    @property
    def complete(self) -> bool:
        """Whether every layer is in the bundle (False for a delta bundle that left some out)."""
        return all(layer.shipped for layer in self.layers)

    def describe(self) -> str:
        return f"{', '.join(self.image.tags) or 'untagged'} ({self.image.id[:19]})"

    def sums(self) -> str:
        """SHA256SUMS: the chunk digests in the form `sha256sum -c` reads."""
        return "".join(f"{c.sha256}  {c.name}\n" for c in self.chunks)

    # ------------------------------------------------------------ JSON
    def to_dict(self) -> dict[str, Any]:
        i = self.image
        return {
            "format": self.format,
            "tool": {"name": self.tool.name, "version": self.tool.version},
            "created": self.created,
            "image": {"id": i.id, "tags": i.tags, "labels": i.labels, "os": i.os, "architecture": i.architecture,
                      "size": i.size, "layout": i.layout},
            "layers": [{"diff_id": x.diff_id, "chain_id": x.chain_id, "path": x.path, "size": x.size,
                        "digest": x.digest, "shipped": x.shipped} for x in self.layers],
            "delta": None if self.delta is None else {"since": self.delta.since, "since_tags": self.delta.since_tags},
            "stream": self.stream.to_dict(),
            "chunks": [{"name": c.name, "size": c.size, "sha256": c.sha256} for c in self.chunks],
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2) + "\n"

    @classmethod
    def from_dict(cls, data: Any, source: Path | str = MANIFEST) -> Manifest:
        """Check and read a manifest object; every problem is one TransferError naming the field."""
        if not isinstance(data, Mapping) or data.get("format") != FORMAT:
            raise TransferError(f"{source} is not a {FORMAT} manifest; export the bundle again with this kernellab.")
        for key in ("image", "layers", "chunks", "stream"):
            if key not in data:
                raise TransferError(f"{source} lacks {key!r}; copy it again from the sender.")
        top = _Fields(data, "", source)
        tool = _Fields(data.get("tool") or {}, "tool", source)
        delta = data.get("delta")
        return cls(
            image=ImageInfo.read(_Fields(data["image"], "image", source)),
            layers=[Layer.read(f) for f in top.objects("layers")],
            stream=StreamInfo.read(_Fields(data["stream"], "stream", source)),
            chunks=[Chunk.read(f) for f in top.objects("chunks")],
            delta=None if delta is None else Delta.read(_Fields(delta, "delta", source)),
            created=top.get("created", str, ""),
            tool=Tool(tool.get("name", str, "kernellab"), tool.get("version", str, "")),
        )

    @classmethod
    def load(cls, path: Path | str) -> Manifest:
        """The manifest of a bundle folder, or of a manifest.json path."""
        path = manifest_path(Path(path))
        try:
            data = json.loads(path.read_text())
        except FileNotFoundError:
            raise TransferError(f"{path} does not exist; point at a bundle folder or its manifest.json.") from None
        except (OSError, ValueError) as e:
            raise TransferError(f"{path} is not a readable manifest ({e}); copy it again from the sender.") from None
        return cls.from_dict(data, path)


def manifest_path(path: Path) -> Path:
    return path / MANIFEST if path.is_dir() else path


def read_manifest(path: Path | str) -> Manifest:
    """The manifest of a bundle folder (or a manifest.json path), checked for the fields import needs."""
    return Manifest.load(path)
