"""The image in the nodes' format, made once per image ID under `<shared>/images/` and reused.

docker, podman  the export-image bundle; a node that lacks the image loads it (node.ensure_loaded)
apptainer       a SIF, from that bundle (Apptainer's own build)
enroot (pyxis)  a squashfs kernellab makes itself: the image's files (layers applied by the engine's
                export) plus /etc/environment, packed by mksquashfs
charliecloud    ch-convert's directory (works unprivileged) or squashfs image
none            nothing: tasks run in the nodes' own Python

Every product is written under a hidden name and renamed when complete, under a lock, so two
submissions of one image never convert it twice and a failure never leaves a half image that a
later run would take for a whole one.
"""
from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from .. import proc
from ..engine import Engine, Image
from ..errors import ClusterError, ClusterUsageError, CommandError, KernellabError
from ..image import compat, targets
from .profile import Profile

#: Mount points the runtimes bind into; a directory image must have them (ch-run cannot create them).
MOUNT_POINTS = ("workspace", "cache", "usr/local/nvidia")


@dataclass(frozen=True)
class Prepared:
    ref: str
    id: str
    path: str          # the image in the nodes' format ("" for none; the bundle for docker/podman)
    arch_list: str
    target_kind: str   # the image's kernellab.kind label: "cpu" for an image without CUDA
    seconds: float     # time spent converting now (0 when reused)
    reused: bool


#: Target kinds whose images have no GPU code (kernellab.image.kinds).
CPU_ONLY = ("cpu",)


def folder(profile: Profile) -> Path:
    return profile.shared / "images"


def short(image_id: str) -> str:
    return image_id.split(":")[-1][:12]


def product(profile: Profile, image_id: str) -> Path:
    """Where the nodes' copy of image_id lives for the profile's runtime."""
    base = folder(profile) / short(image_id)
    suffix = {"docker": ".bundle", "podman": ".bundle", "apptainer": ".sif", "enroot": ".sqsh",
              "charliecloud": ".ch" if profile.charliecloud_format == "dir" else ".sqfs"}[profile.runtime]
    return base.with_name(base.name + suffix)


def inspect(image: str | Image, eng: Engine) -> Prepared:
    """What the image is (ID, arch list, target kind), before anything is converted."""
    image = eng.image(image)
    return Prepared(image.ref, image.id, "", image.labels.get("kernellab.arch-list", ""),
                    image.labels.get("kernellab.kind", ""), 0.0, False)


def prepare(profile: Profile, image: str | Image, eng: Engine) -> Prepared:
    """Convert the image for the profile's runtime unless the shared folder has it for this image ID."""
    seen = inspect(image, eng)
    ref = seen.ref
    image_id, arch_list, kind = seen.id, seen.arch_list, seen.target_kind
    if profile.runtime in ("docker", "podman") and not profile.load_images:
        return seen  # the profile says the nodes' engines have it; a node that lacks it says so
    out = product(profile, image_id)
    if out.exists():
        return Prepared(ref, image_id, str(out), arch_list, kind, 0.0, True)
    folder(profile).mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    with _lock(out):
        if out.exists():  # another submission made it while we waited for the lock
            return Prepared(ref, image_id, str(out), arch_list, kind, 0.0, True)
        print(f"converting {ref} ({short(image_id)}) for {profile.runtime} into {out} (once per image ID) ...",
              flush=True)
        CONVERTERS[profile.runtime](ref, image_id, out, eng, profile)
    return Prepared(ref, image_id, str(out), arch_list, kind, time.monotonic() - t0, False)


def check_archs(prepared: Prepared, gpu_types: list[str]) -> list[str]:
    """Refuse GPU types whose compute capability the image's arch list misses (doctor's rule).

    Returns warnings for what cannot be checked: a CPU-only image, a GPU type the matrix does not know.
    """
    notes: list[str] = []
    if not prepared.arch_list or prepared.target_kind in CPU_ONLY:
        return [f"{prepared.ref} is a CPU image: GPU ops will skip on every GPU type"]
    matrix = targets.load()
    for g in gpu_types:
        known = matrix.gpu(g)
        if known is None:
            notes.append(f"GPU type {g} is not in docker/matrix.toml: its arch coverage is not checked")
            continue
        finding = compat.arch_finding([known.cc], prepared.arch_list)
        if finding.severity == compat.FAIL:
            raise ClusterUsageError(f"{prepared.ref} cannot run on {g}: {finding.message}; "
                               f"{finding.remedy}; nothing was submitted.")
    return notes


@contextlib.contextmanager
def _lock(out: Path) -> Iterator[None]:
    with open(out.with_name(f".{out.name}.lock"), "a+") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _partial(out: Path) -> Path:
    part = out.with_name(f".{out.name}.partial-{os.getpid()}")
    _remove(part)
    return part


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


def _bundle(ref: str, image_id: str, out: Path, eng: Engine, profile: Profile) -> None:
    from ..transfer import export_image

    part = _partial(out)
    try:
        export_image(ref, part, engine=eng)
        os.rename(part, out)
    finally:
        _remove(part)


def _sif(ref: str, image_id: str, out: Path, eng: Engine, profile: Profile) -> None:
    from ..transfer import import_bundle

    bundle = product(Profile(**{**profile.__dict__, "runtime": "docker"}), image_id)
    if not bundle.exists():
        _bundle(ref, image_id, bundle, eng, profile)
    inner = next(p for p in bundle.iterdir() if p.is_dir())
    import_bundle(inner, to="sif", output=out, engine=eng)


def _sqsh(ref: str, image_id: str, out: Path, eng: Engine, profile: Profile) -> None:
    """An enroot image: the flattened file system, the image's environment, squashed."""
    if not proc.which("mksquashfs"):
        raise ClusterError("mksquashfs is not installed here; install squashfs-tools (Debian/Ubuntu) to make "
                           "enroot images.")
    part, root = _partial(out), _partial(out.with_name(out.name + ".root"))
    try:
        unpack(ref, root, eng)
        env = eng.env(ref)
        (root / "etc").mkdir(exist_ok=True)
        # enroot reads the image's environment from /etc/environment (its own import writes it so too).
        (root / "etc" / "environment").write_text("".join(f"{k}={v}\n" for k, v in env.items()))
        proc.run(["mksquashfs", str(root), str(part), "-noappend", "-no-progress", "-quiet"], timeout=3600)
        os.rename(part, out)
    except CommandError as e:
        raise ClusterError(f"mksquashfs failed for {ref}: {e.tail.strip().splitlines()[-1:] or e}; nothing was "
                           "left in the shared folder.") from None
    finally:
        _remove(part)
        _remove(root)


def unpack(ref: str, root: Path, eng: Engine) -> None:
    """The image's files (its layers applied, whiteouts honoured by the engine) into root."""
    root.mkdir(parents=True)
    with eng.export_rootfs(ref) as src, proc.pipe_to(["tar", "-x", "-C", str(root), "-f", "-"]) as dst:
        shutil.copyfileobj(src, dst.stream, 1 << 20)
    for m in MOUNT_POINTS:
        (root / m).mkdir(parents=True, exist_ok=True)


def _charliecloud(ref: str, image_id: str, out: Path, eng: Engine, profile: Profile) -> None:
    if not proc.which("ch-convert"):
        raise ClusterError("Charliecloud's ch-convert is not installed here; install charliecloud (Debian/Ubuntu "
                           "package, or `module load charliecloud`) on this machine.")
    part = _partial(out)
    fmt = profile.charliecloud_format
    try:
        if fmt == "dir":
            proc.run(["ch-convert", "-i", eng.name, "-o", "dir", ref, str(part)], timeout=3600)
            for m in MOUNT_POINTS:  # ch-run binds only onto folders that exist in the image
                (part / m).mkdir(parents=True, exist_ok=True)
        else:
            root = _partial(out.with_name(out.name + ".root"))
            try:
                proc.run(["ch-convert", "-i", eng.name, "-o", "dir", ref, str(root)], timeout=3600)
                for m in MOUNT_POINTS:
                    (root / m).mkdir(parents=True, exist_ok=True)
                proc.run(["ch-convert", "-i", "dir", "-o", "squash", str(root), str(part)], timeout=3600)
            finally:
                _remove(root)
        os.rename(part, out)
    except (CommandError, KernellabError) as e:
        raise ClusterError(f"ch-convert could not convert {ref}: {str(e).strip().splitlines()[-1]}") from None
    finally:
        _remove(part)


CONVERTERS = {"docker": _bundle, "podman": _bundle, "apptainer": _sif, "enroot": _sqsh, "charliecloud": _charliecloud}
