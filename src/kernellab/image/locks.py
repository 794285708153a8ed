"""The lock (docker/locks/<target>.json): what a build resolved, so that later builds install exactly that.

It records the spec, the base image (reference and digest or image ID), the Debian packages of the base
and of the image with the archive they came from, the toolchain versions and `pip freeze`. How a build
uses it (`invoke build-image`):

- prefer (the default): follow the lock when it was made for this spec, else resolve afresh; when
  the lock can no longer be followed (the archive dropped a pinned version, the base moved on), say
  so in one line and resolve afresh. The lock is then rewritten.
- strict (`--locked`): follow the lock or stop with one sentence naming what no longer fits.
- update (`--update`): resolve afresh and rewrite the lock.

A lock file is written only when its content changes, so rebuilding from a lock leaves git clean.
"""
from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import IO, Any, Literal

from .. import shown
from ..errors import BuildError
from . import debian
from .spec import Spec
from .targets import DOCKER_DIR

LOCK_DIR = DOCKER_DIR / "locks"
Mode = Literal["prefer", "strict", "update"]
MODES: tuple[Mode, ...] = ("prefer", "strict", "update")


def lock_path(spec: Spec, lock_dir: Path = LOCK_DIR) -> Path:
    name = spec.target or spec.tag.split(":", 1)[1]
    return lock_dir / f"{name}.json"


def lock_digest(lock: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(lock, sort_keys=True).encode()).hexdigest()


def read_lock(spec: Spec, lock_dir: Path = LOCK_DIR) -> dict[str, Any]:
    """The lock for spec, or BuildError: none, not a lock, or made for another spec."""
    path = lock_path(spec, lock_dir)
    if not path.exists():
        raise BuildError(f"no lock at {shown(path)}; build once without --locked to create it.")
    lock = _load(path)
    changed = _differs(lock, spec)
    if changed:
        raise BuildError(f"the lock {path.name} was made for a different spec (differs in: {', '.join(changed)}); "
                         f"rebuild without --locked to refresh it, or restore the matrix it was made from.")
    return lock


def _load(path: Path) -> dict[str, Any]:
    try:
        lock = json.loads(path.read_text())
        if not isinstance(lock["base"]["digest"], str) or not isinstance(lock["pip_freeze"], list):
            raise TypeError  # the keys a locked build needs
    except (ValueError, KeyError, TypeError):
        raise BuildError(f"the lock {path} is not a kernellab lock (bad JSON or missing keys); restore it from "
                         f"git or rebuild without --locked.") from None
    return lock


def _differs(lock: dict[str, Any], spec: Spec) -> list[str]:
    """The spec fields the lock was made with other values for."""
    want = json.loads(json.dumps(spec.to_dict()))  # as JSON has it: tuples become lists
    return sorted(k for k in want if lock.get("spec", {}).get(k) != want[k])


def choose(spec: Spec, mode: Mode, lock_dir: Path, out: IO[str]) -> dict[str, Any] | None:
    """The lock a build follows in this mode, or None to resolve afresh (strict: BuildError instead)."""
    if mode == "update":
        return None
    if mode == "strict":
        return read_lock(spec, lock_dir)
    path = lock_path(spec, lock_dir)
    if not path.exists():
        return None
    try:
        lock = _load(path)
    except BuildError:
        out.write(f"note: {shown(path)} is not a kernellab lock: resolving afresh; it will be rewritten.\n")
        return None
    changed = _differs(lock, spec)
    if changed:
        out.write(f"note: {shown(path)} was made for another spec (differs in: {', '.join(changed)}): "
                  f"resolving afresh; it will be rewritten.\n")
        return None
    return lock


def base_moved(lock: dict[str, Any], base_ref: str, digest: str, packages: dict[str, str]) -> str | None:
    """Why the base image is not the locked one (a sentence), or None when it is, or cannot be told."""
    if lock["base"]["digest"] == digest:
        return None
    locked = debian.parse_packages(lock.get("debian", {}).get("base", []))
    changes = debian.changed(locked, packages) if locked and packages else []
    what = f" (Debian's archive has moved on: {debian.sentence(changes)})" if changes else ""
    return f"the base image {base_ref} is {digest[:19]}, not the locked {lock['base']['digest'][:19]}{what}"


def apt_pins(lock: dict[str, Any] | None) -> list[str] | None:
    """The `name=version`s a build following this lock installs with apt (None: the lock has none)."""
    if not lock or not lock.get("debian", {}).get("image"):
        return None
    section = lock["debian"]
    return debian.pins(debian.parse_packages(section.get("base", [])), debian.parse_packages(section["image"]))


def make(spec: Spec, *, base_ref: str, base_digest: str, base_packages: dict[str, str], info: dict[str, Any],
         archive: str | None) -> dict[str, Any]:
    """The lock of a finished build; `info` is kernellab.envinfo's description of the image."""
    lock: dict[str, Any] = {
        "kernellab_lock": 1,
        "spec": json.loads(json.dumps(spec.to_dict())),
        "base": {"ref": spec.base, "from": base_ref, "digest": base_digest},
        "arch_list": spec.arch_list,
        "gencode": spec.gencode,
        "versions": info["versions"],
        "pip_freeze": info["pip_freeze"],
    }
    image_packages = debian.parse_packages(info.get("debian_packages") or [])
    if image_packages:
        lock["debian"] = {"archive": archive, "base": debian.as_list(base_packages),
                          "image": debian.as_list(image_packages)}
    return lock


def text(lock: dict[str, Any]) -> str:
    return json.dumps(lock, indent=2, sort_keys=True) + "\n"


def stage(lock: dict[str, Any], path: Path) -> Path | None:
    """Write the lock beside `path` (to be moved there by `commit` once the image is tagged); None when
    `path` already holds exactly this lock, which is then left untouched."""
    new = text(lock)
    try:
        if path.exists() and path.read_text() == new:
            return None
        path.parent.mkdir(parents=True, exist_ok=True)
        pending = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        pending.write_text(new)
    except OSError as e:
        raise BuildError(f"cannot write the lock {path} ({e.strerror}); nothing was tagged.") from None
    return pending


def commit(pending: Path | None, path: Path) -> None:
    if pending is not None:
        os.replace(pending, path)


def discard(pending: Path | None) -> None:
    if pending is not None:
        pending.unlink(missing_ok=True)
