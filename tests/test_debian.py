"""Debian bases, locks and the debian toolkit kind, without an engine (tests/test_debian_docker.py builds them)."""
from __future__ import annotations

import dataclasses
import io
import json
import os
import tarfile
from pathlib import Path

import pytest

from kernellab.errors import BuildError, CommandError, ConfigError, ResolveError
from kernellab.image import builder, debian, locks, render, targets
from kernellab.image.resolve import resolve

M = targets.load()

APT_GONE = """#9 3.1 Reading package lists...
#9 3.4 E: Version '12.2.0-14' for 'gcc-12' was not found
#9 3.4 E: Version '2.36-9+deb12u4' for 'libc6-dev' was not found
#9 3.4 E: Unable to locate package libgone1
#9 ERROR: process "/bin/bash -o pipefail -c apt-get install" did not complete successfully: exit code: 100
"""


def test_packages_round_trip_and_pins_are_what_the_base_lacks():
    base = debian.parse_packages("bash=5.2-1\nlibc6=2.36-9\n\nnot a package line\n".splitlines())
    assert base == {"bash": "5.2-1", "libc6": "2.36-9"}
    image = {**base, "libc6": "2.36-10", "gcc-12": "12.2.0-14", "g++-12": "12.2.0-14"}
    assert debian.pins(base, image) == ["g++-12=12.2.0-14", "gcc-12=12.2.0-14", "libc6=2.36-10"]
    assert debian.parse_packages(debian.as_list(image)) == image
    assert debian.changed(base, image) == ["g++-12 - -> 12.2.0-14", "gcc-12 - -> 12.2.0-14", "libc6 2.36-9 -> 2.36-10"]


def test_apt_refusing_a_pinned_version_becomes_one_sentence_naming_them():
    assert debian.missing_versions(APT_GONE) == ["gcc-12=12.2.0-14", "libc6-dev=2.36-9+deb12u4", "libgone1"]
    error = builder._build_failure(CommandError(["docker", "build"], 1, APT_GONE), resolve(M, target="cpu"), pinned=True)
    assert isinstance(error, builder.PinsGone) and error.missing[:2] == ["gcc-12=12.2.0-14", "libc6-dev=2.36-9+deb12u4"]
    text = str(error)
    assert "no longer has: gcc-12=12.2.0-14, libc6-dev=2.36-9+deb12u4, libgone1;" in text and "--update" in text
    assert "\n" not in text
    unpinned = builder._build_failure(CommandError(["docker", "build"], 1, APT_GONE), resolve(M, target="cpu"))
    assert not isinstance(unpinned, builder.PinsGone), "without a lock, a missing package is the build's own failure"


def test_the_base_image_config_depends_on_the_layer_and_the_epoch_only(tmp_path: Path):
    a = debian.image_config("sha256:" + "1" * 64, 1735689600, "base")
    assert a == debian.image_config("sha256:" + "1" * 64, 1735689600, "base")
    assert a != debian.image_config("sha256:" + "2" * 64, 1735689600, "base")
    config = json.loads(a)
    assert config["created"] == "2025-01-01T00:00:00Z" and config["rootfs"]["diff_ids"] == ["sha256:" + "1" * 64]


def test_the_base_archive_is_what_docker_load_reads(tmp_path: Path):
    layer = tmp_path / "rootfs.tar"
    with tarfile.open(layer, "w") as tar:
        info = tarfile.TarInfo("etc/hostname")
        info.size = 3
        tar.addfile(info, io.BytesIO(b"kl\n"))
    config = debian.image_config(debian.layer_digest(layer), 0, "test")
    buffer = io.BytesIO()
    debian.write_archive(buffer, layer, config, "kernellab-base:debian-test")
    buffer.seek(0)
    with tarfile.open(fileobj=buffer) as tar:
        manifest = json.loads(tar.extractfile("manifest.json").read())  # type: ignore[union-attr]
        (entry,) = manifest
        assert entry["RepoTags"] == ["kernellab-base:debian-test"]
        assert tar.extractfile(entry["Config"]).read() == config  # type: ignore[union-attr]
        assert tar.extractfile(entry["Layers"][0]).read() == layer.read_bytes()  # type: ignore[union-attr]
        assert entry["Layers"][0] == debian.layer_digest(layer).split(":")[1] + "/layer.tar"


def _lock(spec, **over):
    lock = locks.make(spec, base_ref="kernellab-base:debian-bookworm", base_digest="sha256:aa",
                      base_packages={"bash": "5.2-1"}, archive="http://deb.debian.org/debian",
                      info={"versions": {"gcc": "12.2.0"}, "pip_freeze": ["torch==2.13.0"],
                            "debian_packages": ["bash=5.2-1", "gcc-12=12.2.0-14"]})
    lock.update(over)
    return lock


def test_a_lock_is_rewritten_only_when_its_content_changes(tmp_path: Path):
    spec = resolve(M, target="cpu")
    path = locks.lock_path(spec, tmp_path)
    lock = _lock(spec)
    locks.commit(locks.stage(lock, path), path)
    before = path.stat().st_mtime_ns
    os.utime(path, ns=(before - 10**9, before - 10**9))
    assert locks.stage(lock, path) is None, "the same content: nothing to write"
    assert path.stat().st_mtime_ns == before - 10**9
    pending = locks.stage(_lock(spec, pip_freeze=["torch==2.13.1"]), path)
    assert pending is not None and json.loads(path.read_text()) == lock, "the old lock stays until the image is tagged"
    locks.commit(pending, path)
    assert json.loads(path.read_text())["pip_freeze"] == ["torch==2.13.1"]


def test_lock_modes_follow_refuse_or_ignore(tmp_path: Path):
    spec = resolve(M, target="cpu")
    out = io.StringIO()
    assert locks.choose(spec, "prefer", tmp_path, out) is None and out.getvalue() == "", "no lock yet: resolve, quietly"
    with pytest.raises(BuildError, match="no lock at"):
        locks.choose(spec, "strict", tmp_path, out)
    lock = _lock(spec)
    path = locks.lock_path(spec, tmp_path)
    locks.commit(locks.stage(lock, path), path)
    assert locks.choose(spec, "prefer", tmp_path, out) == lock
    assert locks.choose(spec, "update", tmp_path, out) is None
    other = dataclasses.replace(spec, extra_pip=("six",))
    locks.commit(locks.stage({**lock, "spec": other.to_dict()}, path), path)
    assert locks.choose(spec, "prefer", tmp_path, out) is None
    assert "was made for another spec (differs in: extra_pip): resolving afresh" in out.getvalue()


def test_a_moved_base_names_the_packages_that_changed():
    spec = resolve(M, target="cpu")
    lock = _lock(spec)
    assert locks.base_moved(lock, "kernellab-base:debian-bookworm", "sha256:aa", {"bash": "5.2-1"}) is None
    why = locks.base_moved(lock, "kernellab-base:debian-bookworm", "sha256:bb", {"bash": "5.2-2"})
    assert why is not None and "Debian's archive has moved on: bash 5.2-1 -> 5.2-2" in why


def test_a_locked_dockerfile_installs_exactly_the_locked_debian_packages():
    spec = resolve(M, target="cpu")
    pins = locks.apt_pins(_lock(spec))
    assert pins == ["gcc-12=12.2.0-14"]
    text = render.dockerfile(spec, M, locked=True, apt_pins=pins)
    assert "--allow-downgrades" in text and "gcc-12=12.2.0-14" in text
    long = [f"lib{'x' * 30}-perl-{i}=1:2.3-4~deb12u{i}" for i in range(12)]
    wrapped = render.dockerfile(spec, M, locked=True, apt_pins=long)
    assert all(p in wrapped for p in long), "a wrapped line never splits a pin"
    assert "apt-get install -y --no-install-recommends ca-certificates" not in text
    assert "gcc-12=" not in render.dockerfile(spec, M, locked=False, apt_pins=pins), "unlocked: names, not pins"


def test_cu124_debian_resolves_to_debians_toolkit_and_pypis_torch():
    spec = resolve(M, target="cu124-debian")
    assert (spec.kind, spec.os, spec.base, spec.cuda, spec.gcc) == ("cuda-debian", "debian13", "debootstrap:trixie", "12.4", 13)
    assert (spec.torch, spec.torch_requirement, spec.torch_index) == ("2.6.0", "torch==2.6.0", None)
    assert spec.cuda_home == "/usr" and spec.arch_list == "8.0;9.0+PTX"
    text = render.dockerfile(spec, M)
    assert "FROM kernellab-base:debian-trixie" in text and "nvidia-cuda-toolkit=12.4.131~12.4.1-2" in text
    assert "nvidia/cuda" not in text and "download.pytorch.org" not in text
    old = resolve(M, target="cu118-debian")
    assert (old.os, old.gcc, old.cuda) == ("debian12", 11, "11.8")


def test_the_debian_toolkit_refuses_what_debian_does_not_ship():
    with pytest.raises(ResolveError, match=r"does not ship CUDA 12.1: it ships CUDA 11.2 \(debian11, bullseye\), "
                                           r"11.8 \(debian12, bookworm\) and 12.4 \(debian13, trixie\)"):
        resolve(M, cuda="12.1", gpu=["a100"], toolkit="debian")
    with pytest.raises(ResolveError, match="sm_100"):
        resolve(M, cuda="12.4", gpu=["b200"], toolkit="debian")
    with pytest.raises(ResolveError, match="in debian13 \\(trixie\\) only"):
        resolve(M, cuda="12.4", gpu=["h100"], toolkit="debian", ubuntu="22.04")


def test_a_librarys_gpu_code_is_listed_per_arch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    from kernellab import proc
    from kernellab.ops import binaries

    lib = tmp_path / "kernellab_x.so"
    lib.write_bytes(b"\x7fELF")
    listed = "ELF file    1: x.sm_80.cubin\nELF file    2: x.sm_90a.cubin\nPTX file    1: x.sm_90.ptx\n"

    def fake_run(argv, **kw):
        text = listed if "--list-elf" in argv else f"\n\tcode for sm_90 in {lib}\n        /*0000*/ MOV R1, c[0x0][0x28] ;\n"
        return proc.Result(argv, 0, text, "")

    monkeypatch.setattr(binaries, "cuobjdump", lambda: "/usr/bin/cuobjdump")
    monkeypatch.setattr(binaries.proc, "run", fake_run)
    found = binaries.fingerprint(lib)
    assert (found.cubins, found.ptx) == (("sm_80", "sm_90a"), ("compute_90",))
    assert found.sass_sha256 and len(found.library_sha256) == 64


def test_cu118_debian_carries_pypis_torch_2_0_1_of_its_time():
    spec = resolve(M, target="cu118-debian")
    assert (spec.torch, spec.torch_variant, spec.torch_requirement, spec.triton) == ("2.0.1", "cu117", "torch==2.0.1", "2.0.0")
    assert spec.python == "3.11" and spec.gcc == 11 and spec.as_of == "2023-06-30"
    text = render.dockerfile(spec, M)
    assert "nvidia-cuda-toolkit=11.8.89~11.8.0-5~deb12u1" in text and "download.pytorch.org" not in text
    # torch 2.0 was built against NumPy 1: numpy<2 beside it (pytorch/pytorch#107302), whatever the date resolves.
    assert "pip install --uploaded-prior-to 2023-06-30T00:00:00Z torch==2.0.1 ninja 'numpy<2' pytest matplotlib" in text
    assert "pip install -c /tmp/kernellab-dated.txt nvidia-ml-py watchfiles" in text
    bare = resolve(M, target="cu118-debian", torch="none")
    assert (bare.torch, bare.torch_variant) == (None, "none") and "No PyTorch" in render.dockerfile(bare, M)
    with_torch = resolve(M, cuda="11.8", toolkit="debian", gpu=["a100"], torch="2.7.1")
    assert with_torch.torch_requirement == "torch==2.7.1+cu118" and with_torch.torch_index
    cpu_bare = resolve(M, gpu=["cpu"], torch="none")  # a CPU image for code that does not use PyTorch (TVM)
    assert (cpu_bare.torch, cpu_bare.torch_requirement) == (None, "") and "notorch" in cpu_bare.tag


def test_debian_11_targets_need_no_registry_and_resolve_as_of_their_day():
    gpu = resolve(M, target="cu112-debian11")
    assert (gpu.os, gpu.base, gpu.cuda, gpu.gcc, gpu.python, gpu.llvm) == \
        ("debian11", "debootstrap:bullseye", "11.2", 10, "3.9", "11")
    assert (gpu.torch_requirement, gpu.torch_index, gpu.ccs) == ("torch==1.13.1", None, ("8.0", "8.6"))
    text = render.dockerfile(gpu, M)
    assert "FROM kernellab-base:debian-bullseye" in text and "nvidia-cuda-toolkit=11.2.2-3+deb11u3" in text
    assert "llvm-11-dev" in text and "clang-11" not in text, "LLVM as a library: llvm-config, no clang"
    assert "--uploaded-prior-to 2023-01-31T00:00:00Z" in text and "pip install pip==26.0.1" in text
    assert "nvidia/cuda" not in text and "download.pytorch.org" not in text
    cpu = resolve(M, target="cpu-debian11")
    assert (cpu.kind, cpu.torch, cpu.torch_variant, cpu.python, cpu.llvm) == ("cpu", None, "none", "3.9", "11")
    assert "-notorch-" in cpu.tag and "torch==" not in render.dockerfile(cpu, M)
    # sm_90 is past CUDA 11.2: refused with the nearest valid pins
    with pytest.raises(ResolveError, match="CUDA 11.2 cannot target"):
        resolve(M, target="cu112-debian11", gpu=["h100"])


def test_as_of_is_in_the_digest_only_where_a_target_sets_it():
    plain = resolve(M, target="cpu")
    assert "as_of" not in plain.to_dict() and "llvm_role" not in plain.to_dict(), "older digests unchanged"
    dated = resolve(M, target="cpu", as_of="2024-01-02")
    assert dated.to_dict()["as_of"] == "2024-01-02" and dated.digest != plain.digest
    assert "--uploaded-prior-to 2024-01-02T00:00:00Z" in render.dockerfile(dated, M)
    locked = render.dockerfile(dated, M, locked=True)
    assert "pip install pip==26.0.1" in locked and "--uploaded-prior-to" not in locked, "a lock pins every version"
    with pytest.raises(ConfigError, match="`as_of` must be a day"):
        resolve(M, target="cpu", as_of="yesterday")
