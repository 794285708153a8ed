"""The enroot image kernellab makes itself (images._sqsh): real tar, mksquashfs and unsquashfs, no engine.

`_sqsh` asks the engine for three things: `create`/`export`/`rm` (the image's files, layers applied)
and `image inspect` (its Env). A stand-in CLI answers them here from a hand-made export tar and
inspect record, given to kernellab's own Docker engine class as its CLI, so everything from
`images.prepare` down (Engine.env, unpack, /etc/environment, mount points, mksquashfs, the rename
into the shared folder) runs for real. squashfs-tools come with `make test-tools`, like the one-node
Slurm: KERNELLAB_REQUIRE_SLURM=1 (CI) makes their absence a failure, not a skip.
"""
from __future__ import annotations

import io
import json
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest

from conftest import _require
from kernellab.cluster import images
from kernellab.cluster.profile import Profile
from kernellab.engine import Docker
from kernellab.errors import ClusterError

IMAGE_ID = "sha256:" + "5a" * 32
ENV = {"PATH": "/opt/kl/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
       "KERNELLAB_IMAGE": "kl-test:cpu", "CFLAGS": "-O2 -DMODE=fast"}
#: What `docker export` of the image's container would stream: its files, layers applied.
FILES = {"opt/kl/bin/hello": (b"#!/bin/sh\necho hello\n", 0o755),
         "opt/kl/data.txt": (b"one layer\n", 0o644),
         "etc/os-release": (b'ID=debian\nVERSION_ID="12"\n', 0o644),
         "etc/environment": (b"STALE=1\n", 0o644),  # the image's own: replaced by its Env
         ".dockerenv": (b"", 0o755)}


def squashfs_problem() -> str | None:
    missing = [t for t in ("mksquashfs", "unsquashfs", "tar") if not shutil.which(t)]
    return f"needs {', '.join(missing)}: `make test-tools` installs squashfs-tools" if missing else None


def export_tar(path: Path) -> None:
    with tarfile.open(path, "w") as tar:
        for d in ("dev", "proc", "sys", "etc", "opt", "opt/kl", "opt/kl/bin"):
            info = tarfile.TarInfo(d)
            info.type, info.mode = tarfile.DIRTYPE, 0o755
            tar.addfile(info)
        for name, (data, mode) in FILES.items():
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), mode
            tar.addfile(info, io.BytesIO(data))
        link = tarfile.TarInfo("opt/kl/bin/hi")
        link.type, link.linkname = tarfile.SYMTYPE, "hello"
        tar.addfile(link)


@pytest.fixture
def engine(tmp_path: Path) -> Docker:
    """kernellab's Docker engine whose CLI is a stand-in serving one image, `kl-test:cpu`."""
    _require("squashfs", squashfs_problem(), "KERNELLAB_REQUIRE_SLURM")
    export_tar(tmp_path / "export.tar")
    (tmp_path / "inspect.json").write_text(json.dumps([{
        "Id": IMAGE_ID, "RepoTags": ["kl-test:cpu"],
        "Config": {"Env": [f"{k}={v}" for k, v in ENV.items()], "Cmd": ["bash"],
                   "Labels": {"kernellab.kind": "cpu", "kernellab.arch-list": ""}}}]))
    cli = tmp_path / "fake-docker"
    cli.write_text(f"""#!/bin/sh
echo "$*" >> {tmp_path}/calls.log
case "$1 $2" in
  "image inspect") [ "$3" = kl-test:cpu ] && exec cat {tmp_path}/inspect.json; echo '[]'; exit 1 ;;
  "create kl-test:cpu") echo c0ffee ;;
  "export c0ffee") exec cat {tmp_path}/export.tar ;;
  "rm -f") ;;
  *) echo "fake docker: unexpected $*" >&2; exit 2 ;;
esac
""")
    cli.chmod(0o755)
    return Docker(cli=str(cli))


def profile(tmp_path: Path) -> Profile:
    return Profile(path=tmp_path / "cluster.toml", shared=tmp_path / "shared", gpu_types={"h100": []},
                   runtime="enroot")


def test_sqsh_round_trip(tmp_path: Path, engine: Docker) -> None:
    prof = profile(tmp_path)
    made = images.prepare(prof, "kl-test:cpu", engine)
    out = prof.shared / "images" / "5a5a5a5a5a5a.sqsh"
    assert (made.path, made.id, made.target_kind, made.reused) == (str(out), IMAGE_ID, "cpu", False)
    assert out.is_file()
    # nothing half-made is left beside it: only the product and its lock
    assert sorted(p.name for p in out.parent.iterdir()) == [".5a5a5a5a5a5a.sqsh.lock", "5a5a5a5a5a5a.sqsh"]
    assert "rm -f c0ffee" in (tmp_path / "calls.log").read_text()  # the container made for export is removed

    listing = subprocess.run(["unsquashfs", "-l", str(out)], capture_output=True, text=True, check=True).stdout
    paths = {line.strip().removeprefix("squashfs-root").lstrip("/") for line in listing.splitlines()}
    assert {*FILES, "opt/kl/bin/hi", "etc/environment"} <= paths
    assert {"workspace", "cache", "usr/local/nvidia"} <= paths  # images.MOUNT_POINTS

    root = tmp_path / "unsquashed"
    subprocess.run(["unsquashfs", "-no-progress", "-d", str(root), str(out)], capture_output=True, check=True)
    for name, (data, mode) in FILES.items():
        if name != "etc/environment":
            assert (root / name).read_bytes() == data, name
            assert (root / name).stat().st_mode & 0o777 == mode, name
    assert (root / "opt/kl/bin/hi").is_symlink() and (root / "opt/kl/bin/hi").resolve().name == "hello"
    # enroot reads the image's environment from /etc/environment: the image's Env, every value whole
    assert (root / "etc/environment").read_text().splitlines() == [f"{k}={v}" for k, v in ENV.items()]
    for m in images.MOUNT_POINTS:
        assert (root / m).is_dir() and not any((root / m).iterdir()), m

    again = images.prepare(prof, "kl-test:cpu", engine)  # once per image ID: reused, not remade
    assert (again.path, again.reused, again.seconds) == (str(out), True, 0.0)


def test_sqsh_without_mksquashfs_says_so_and_leaves_nothing(tmp_path: Path, engine: Docker,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    which = images.proc.which
    monkeypatch.setattr(images.proc, "which", lambda name: None if name == "mksquashfs" else which(name))
    prof = profile(tmp_path)
    with pytest.raises(ClusterError, match="mksquashfs is not installed here; install squashfs-tools"):
        images.prepare(prof, "kl-test:cpu", engine)
    assert [p.name for p in (prof.shared / "images").iterdir()] == [".5a5a5a5a5a5a.sqsh.lock"]
