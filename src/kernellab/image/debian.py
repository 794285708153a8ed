"""Debian's archive: base images that are the same bit for bit, and the package versions a lock pins.

A `debootstrap:<suite>` base is made with mmdebstrap (minbase, matrix.toml's [debian] components), every
file dated SOURCE_DATE_EPOCH, so its root file system tar depends only on the package versions. That
tar becomes the one layer of an image written here in the engine's own save format with a fixed config
(created at the same epoch), and loaded: the image ID is the hash of that config, which names the
layer by its hash, so the same package versions give the same image ID on every machine and every
day. `docker import` would stamp the time of the import instead.

The lock records the Debian packages of the base and of the built image (`packages_line` reads them
from `dpkg-query`); a locked build installs exactly the image's versions (`pins`), and apt's refusal of a
version the archive no longer has becomes one sentence naming them (`missing_versions`).
"""
from __future__ import annotations

import hashlib
import io
import json
import os
import platform
import re
import shutil
import tarfile
import tempfile
import time
from pathlib import Path
from typing import IO, Iterable, Mapping

from .. import proc
from ..engine import Engine
from ..errors import BuildError
from .targets import DebianArchive

#: What `dpkg-query -W -f` prints per package; `parse_packages` reads it back.
DPKG_FORMAT = "${Package}=${Version}\\n"
#: apt's refusal of a pinned version ("E: Version '12.2.0-14' for 'gcc-12' was not found"), or of a
#: package gone altogether ("E: Unable to locate package libfoo1").
_MISSING = re.compile(r"E: Version '([^']+)' for '([^']+)' was not found")
_GONE = re.compile(r"E: Unable to locate package (\S+)")
_ARCHES = {"x86_64": "amd64", "aarch64": "arm64", "arm64": "arm64", "ppc64le": "ppc64le", "s390x": "s390x"}


def mirror(archive: DebianArchive) -> str:
    """The mirror bases are made from: $KERNELLAB_DEBIAN_MIRROR, else matrix.toml's."""
    return os.environ.get("KERNELLAB_DEBIAN_MIRROR") or archive.mirror


def make_base(suite: str, tag: str, archive: DebianArchive, *, engine: Engine, out: IO[str]) -> str:
    """Make image `tag` from Debian `suite` (needs root and mmdebstrap); return its image ID."""
    if shutil.which("mmdebstrap") is None:
        raise BuildError(f"the base image {tag} is made with mmdebstrap, which is not installed; "
                         f"`sudo apt-get install mmdebstrap` (or `make setup`) and try again.")
    if os.geteuid() != 0:
        raise BuildError(f"making the base image {tag} with mmdebstrap needs root; run "
                         f"`sudo .venv/bin/invoke base-image --suite {suite}` once.")
    url = mirror(archive)
    with tempfile.TemporaryDirectory(prefix="kl-mmdebstrap-") as tmp:
        rootfs = Path(tmp) / "rootfs.tar"
        out.write(f"making base image {tag}: mmdebstrap {suite} ({', '.join(archive.components)}) from {url}\n")
        started = time.monotonic()
        argv = ["mmdebstrap", "--variant=minbase", f"--components={','.join(archive.components)}",
                "--quiet", suite, str(rootfs), url]
        proc.run(argv, stream=True, out=out, env={"SOURCE_DATE_EPOCH": str(archive.source_date_epoch)},
                 hint="check that Debian's archive is reachable (or set KERNELLAB_DEBIAN_MIRROR)")
        config = image_config(layer_digest(rootfs), archive.source_date_epoch,
                              f"kernellab base: Debian {suite} minbase ({', '.join(archive.components)})")
        with engine.load() as pipe:
            write_archive(pipe.stream, rootfs, config, tag)
    want = "sha256:" + hashlib.sha256(config).hexdigest()
    got = engine.image_id(tag)
    if got != want:  # an engine that rewrites the config would lose the point of all this
        out.write(f"warning: {engine.name} gave {tag} the ID {got[:19]}, not {want[:19]} (its config was rewritten)\n")
    out.write(f"made {tag} ({got[:19]}) in {time.monotonic() - started:.0f} s\n")
    return got


def layer_digest(path: Path) -> str:
    """The layer's diff ID: the sha256 of its uncompressed tar."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    return "sha256:" + digest.hexdigest()


def image_config(diff_id: str, epoch: int, created_by: str) -> bytes:
    """The image config of a one-layer image, as bytes whose hash is the image ID (no time but `epoch`)."""
    created = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch))
    config = {
        "architecture": _ARCHES.get(platform.machine(), platform.machine()),
        "os": "linux",
        "created": created,
        "config": {"Env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"], "Cmd": ["bash"]},
        "rootfs": {"type": "layers", "diff_ids": [diff_id]},
        "history": [{"created": created, "created_by": created_by}],
    }
    return json.dumps(config, sort_keys=True, separators=(",", ":")).encode()


def write_archive(stream: IO[bytes], layer: Path, config: bytes, tag: str) -> None:
    """A save archive (docker-archive layout) of one layer and its config, as `docker load` reads it.
    The layer is named by the diff ID the config already holds: it is not hashed again."""
    config_name = hashlib.sha256(config).hexdigest() + ".json"
    (diff_id,) = json.loads(config)["rootfs"]["diff_ids"]
    layer_name = diff_id.split(":", 1)[1] + "/layer.tar"
    manifest = json.dumps([{"Config": config_name, "RepoTags": [tag], "Layers": [layer_name]}]).encode()
    with tarfile.open(fileobj=stream, mode="w|", format=tarfile.PAX_FORMAT) as tar:
        for name, data in ((config_name, config), ("manifest.json", manifest)):
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o644
            tar.addfile(info, io.BytesIO(data))
        info = tarfile.TarInfo(layer_name)
        info.size, info.mode = layer.stat().st_size, 0o644
        with open(layer, "rb") as f:
            tar.addfile(info, f)


# --------------------------------------------------------------------------- package versions


def parse_packages(lines: Iterable[str]) -> dict[str, str]:
    """"name=version" lines (`dpkg-query -W -f DPKG_FORMAT` output, a lock's list) as {name: version}."""
    found = {}
    for line in lines:
        name, sep, version = line.strip().partition("=")
        if sep and name and version:
            found[name] = version
    return found


def as_list(packages: Mapping[str, str]) -> list[str]:
    """{name: version} as a lock stores it: sorted "name=version" lines."""
    return [f"{name}={version}" for name, version in sorted(packages.items())]


def pins(base: Mapping[str, str], image: Mapping[str, str]) -> list[str]:
    """What a locked build asks apt for: every package of the image that the base does not have at that
    version, as `name=version` (dependencies too: nothing is left for apt to choose)."""
    return [f"{name}={version}" for name, version in sorted(image.items()) if base.get(name) != version]


def missing_versions(log: str) -> list[str]:
    """The pinned `name=version`s (or names) apt could not find, from a build's log."""
    found = [f"{name}={version}" for version, name in _MISSING.findall(log)] + _GONE.findall(log)
    return list(dict.fromkeys(found))


def changed(locked: Mapping[str, str], now: Mapping[str, str]) -> list[str]:
    """How two package sets differ, as `name locked -> now` (`-` for absent), for a sentence."""
    names = sorted(set(locked) | set(now))
    return [f"{n} {locked.get(n, '-')} -> {now.get(n, '-')}" for n in names if locked.get(n) != now.get(n)]


def sentence(items: Iterable[str], limit: int = 6) -> str:
    items = list(items)
    more = f" and {len(items) - limit} more" if len(items) > limit else ""
    return ", ".join(items[:limit]) + more
