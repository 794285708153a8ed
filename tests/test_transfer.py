"""Image bundles: pure logic first, then round trips through the real Docker engine.

Test images are tiny, built without a registry: a base from `docker import` of a folder, then
COPY-only layers on top (no RUN, so the images need no shell). Every tag starts with
kltest-transfer- and a per-run suffix; teardown removes only those.
"""
from __future__ import annotations

import hashlib
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import uuid
from pathlib import Path

import pytest

from kernellab import engine, proc, transfer
from kernellab.errors import EngineError, TransferError
from kernellab.image import compat

ROOT = Path(__file__).resolve().parents[1]


# ---------------------------------------------------------------- pure logic


@pytest.mark.parametrize("text, expected", [("1G", 1 << 30), ("512M", 512 << 20), ("64k", 64 << 10),
                                            ("1.5g", 3 << 29), ("4096", 4096), ("2MiB", 2 << 20)])
def test_parse_size(text, expected):
    assert transfer.parse_size(text) == expected


@pytest.mark.parametrize("text", ["lots", "1X", "", "100"])
def test_parse_size_refuses_nonsense_and_tiny_chunks(text):
    with pytest.raises(TransferError, match="size"):
        transfer.parse_size(text)


def test_chain_ids_match_the_engines_layer_store():
    # Values read from a Docker 20.10 layerdb: the second chain ID is the folder name it used.
    diff_ids = ["sha256:323e04dc81bae18982a5050a327da3cf2c0c2683fdd3682ac47df180908a4683",
                "sha256:f0deb5bc873a40d7549f6692546724b1e5342deaacfcd7b02357b2023cc5f715"]
    assert transfer.chain_ids(diff_ids) == [
        diff_ids[0], "sha256:0c343fd3d343c26b666ff859530b0798726571d2c449d0868f2dfbdeb2c213c7"]


@pytest.mark.parametrize("arch_list, cc, ok", [
    ("8.0;8.6", "8.6", True),
    ("8.0", "8.9", True),          # sm_80 SASS runs on later 8.x GPUs
    ("8.0;8.6", "9.0", False),     # but not on a new major version
    ("8.0;9.0+PTX", "10.0", True),  # PTX is compiled by the driver for newer GPUs
    ("9.0+PTX", "8.6", False),     # never for older ones
    ("9.0a", "9.0", True),
    ("9.0a", "10.0", False),       # arch-specific features bind to exactly one GPU
    ("7.5 8.0 8.6", "7.5", True),
])
def test_arch_coverage(arch_list, cc, ok):
    assert transfer.covers(arch_list, cc) is ok


LABELS = {"kernellab.cuda": "12.4", "kernellab.min-driver": "550.54.14", "kernellab.arch-list": "8.0;9.0"}


def _fingerprint(driver, *ccs):
    return {"kernellab": "0.1.0", "driver": driver, "docker": {}, "checks": [],
            "gpus": [{"name": f"GPU{cc}", "compute_capability": cc, "uuid": "x", "memory_mib": 1} for cc in ccs]}


def test_check_target_accepts_a_suitable_machine():
    assert [f for f in transfer.check_target(LABELS, _fingerprint("580.159.04", "9.0", "8.0"))
            if f.severity == compat.WARN] == []


def test_check_target_warns_about_old_driver_and_uncovered_gpu():
    findings = transfer.check_target(LABELS, _fingerprint("535.104.05", "9.0", "12.0"))
    warnings = [f.message for f in findings if f.severity == compat.WARN]
    assert len(warnings) == 2
    assert "535.104.05 is older than 550.54.14" in warnings[0]
    assert "GPU 1" in warnings[1] and "12.0" in warnings[1]


def test_check_target_warns_when_there_is_no_driver():
    warnings = [f.message for f in transfer.check_target(LABELS, _fingerprint(None)) if f.severity == compat.WARN]
    assert warnings and "no NVIDIA driver" in warnings[0]


def test_load_fingerprint_refuses_other_json(tmp_path):
    path = tmp_path / "f.json"
    path.write_text('{"hello": 1}')
    with pytest.raises(TransferError, match="not a doctor fingerprint"):
        transfer.load_fingerprint(path)


def _tar(members: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as t:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            t.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def test_copy_tar_drops_chosen_members_and_keeps_a_valid_archive():
    long_name = "blobs/sha256/" + "a" * 120  # longer than ustar allows: carried by a PAX header
    members = {"manifest.json": b'[{"Layers": []}]', long_name: os.urandom(3000), "keep/layer.tar": b"k" * 700}
    out = io.BytesIO()
    summary = transfer.copy_archive(io.BytesIO(_tar(members)), out.write,
                                    drop=lambda m: m.path == long_name, capture=["manifest.json"])
    assert summary.complete
    assert summary.dropped == {long_name: "sha256:" + hashlib.sha256(members[long_name]).hexdigest()}
    assert summary.captured["manifest.json"] == members["manifest.json"]
    assert summary.members[long_name].size == 3000
    with tarfile.open(fileobj=io.BytesIO(out.getvalue())) as t:
        assert t.getnames() == ["manifest.json", "keep/layer.tar"]
        assert t.extractfile("keep/layer.tar").read() == members["keep/layer.tar"]
    assert summary.tar_bytes == len(out.getvalue())


def test_copy_tar_reports_a_stream_that_stops_early():
    whole = _tar({"a": os.urandom(5000)})
    summary = transfer.copy_archive(io.BytesIO(whole[:2000]), lambda b: None, drop=lambda m: False)
    assert not summary.complete


def test_read_manifest_refuses_a_foreign_file(tmp_path):
    (tmp_path / "manifest.json").write_text('{"schemaVersion": 2}')
    with pytest.raises(TransferError, match="not a kernellab-bundle/1 manifest"):
        transfer.read_manifest(tmp_path)


# ---------------------------------------------------------------- the manifest, typed

# What kernellab wrote before the manifest became typed (a delta bundle, so every part is there).
OLD_MANIFEST = {
    "format": "kernellab-bundle/1",
    "tool": {"name": "kernellab", "version": "0.1.0"},
    "created": "2025-01-31T12:00:00+00:00",
    "image": {"id": "sha256:" + "a" * 64, "tags": ["kernellab:cu124", "kernellab:cu124-torch2.5"],
              "labels": {"kernellab.cuda": "12.4", "kernellab.arch-list": "8.0;9.0"}, "os": "linux",
              "architecture": "amd64", "size": 123456789, "layout": "docker-legacy"},
    "layers": [
        {"diff_id": "sha256:" + "1" * 64, "chain_id": "sha256:" + "1" * 64, "path": "b" * 64 + "/layer.tar",
         "size": 80000000, "digest": "sha256:" + "1" * 64, "shipped": False},
        {"diff_id": "sha256:" + "2" * 64, "chain_id": "sha256:" + "3" * 64, "path": "c" * 64 + "/layer.tar",
         "size": 4096, "digest": "sha256:" + "2" * 64, "shipped": True},
    ],
    "delta": {"since": "sha256:" + "d" * 64, "since_tags": ["kernellab:cu124-old"]},
    "stream": {"compression": "zstd", "level": 3, "tar_bytes": 90000, "bytes": 2048, "sha256": "e" * 64},
    "chunks": [{"name": "image.tar.zst.000", "size": 1024, "sha256": "f" * 64},
               {"name": "image.tar.zst.001", "size": 1024, "sha256": "0" * 64}],
}


def test_a_manifest_in_the_old_format_loads_and_writes_back_unchanged(tmp_path):
    (tmp_path / "manifest.json").write_text(json.dumps(OLD_MANIFEST, indent=2))
    m = transfer.read_manifest(tmp_path)
    assert isinstance(m, transfer.Manifest)
    assert m.image.tags == ["kernellab:cu124", "kernellab:cu124-torch2.5"]
    assert m.image.labels["kernellab.cuda"] == "12.4"
    assert [layer.shipped for layer in m.layers] == [False, True] and not m.complete
    assert m.delta is not None and m.delta.since_tags == ["kernellab:cu124-old"]
    assert (m.stream.tar_bytes, m.stream.compressed, m.stream.level) == (90000, 2048, 3)
    assert [c.name for c in m.chunks] == ["image.tar.zst.000", "image.tar.zst.001"]
    assert m.to_dict() == OLD_MANIFEST
    assert json.loads(m.to_json()) == OLD_MANIFEST
    assert transfer.Manifest.from_dict(json.loads(m.to_json())) == m


def test_a_full_manifest_round_trips_and_its_sums_are_sha256sum_lines():
    full = {**OLD_MANIFEST, "delta": None, "layers": [{**layer, "shipped": True} for layer in OLD_MANIFEST["layers"]]}
    m = transfer.Manifest.from_dict(full)
    assert m.delta is None and m.complete
    assert m.to_dict() == full
    assert m.sums() == f"{'f' * 64}  image.tar.zst.000\n{'0' * 64}  image.tar.zst.001\n"
    assert m.describe() == "kernellab:cu124, kernellab:cu124-torch2.5 (sha256:aaaaaaaaaaaa)"


def test_a_trimmed_manifest_gets_defaults_for_what_import_does_not_need():
    m = transfer.Manifest.from_dict({"format": transfer.FORMAT, "image": {"id": "sha256:1", "tags": []},
                                     "layers": [{"diff_id": "sha256:1", "chain_id": "sha256:1", "shipped": True}],
                                     "chunks": [], "stream": {"tar_bytes": 0, "bytes": 0}})
    assert m.layers[0].digest == "sha256:1" and m.stream.compression == "zstd" and m.delta is None


@pytest.mark.parametrize("change, field", [
    (lambda d: d["chunks"][1].pop("sha256"), "chunks[1].sha256"),
    (lambda d: d["stream"].update(tar_bytes="90000"), "stream.tar_bytes"),
    (lambda d: d["layers"][0].update(shipped="no"), "layers[0].shipped"),
    (lambda d: d["image"].update(tags="kernellab:cu124"), "image.tags"),
    (lambda d: d.update(chunks={}), "chunks"),
    (lambda d: d["layers"].append("sha256:1"), "layers[2]"),
])
def test_a_malformed_field_is_named(change, field):
    data = json.loads(json.dumps(OLD_MANIFEST))
    change(data)
    with pytest.raises(TransferError, match=rf"^manifest\.json (lacks|has an invalid) {re.escape(field)}[ ;]"):
        transfer.Manifest.from_dict(data, "manifest.json")


def test_a_chunk_name_outside_the_bundle_is_refused():
    data = json.loads(json.dumps(OLD_MANIFEST))
    data["chunks"][0]["name"] = "../../etc/passwd"
    with pytest.raises(TransferError, match="outside the bundle folder"):
        transfer.Manifest.from_dict(data)


# ---------------------------------------------------------------- the save archive, read by tarfile


def _save_archive(layout: str) -> tuple[bytes, list[str], dict[str, bytes]]:
    """A small save archive as Docker (legacy) or Podman writes it: bytes, diff IDs, layer files.

    Docker: `<v1>/layer.tar` files, a repeated layer as a symlink to its first copy, `repositories`.
    Podman: `<diff id>.tar` files with `<v1>/layer.tar` symlinks to them, manifest.json naming the
    `.tar` files, no `repositories`.
    """
    contents = [_tar({"etc/hello": b"hello\n"}), _tar({"a": os.urandom(3000)}), _tar({"etc/hello": b"hello\n"})]
    diff_ids = ["sha256:" + hashlib.sha256(c).hexdigest() for c in contents]
    buf = io.BytesIO()
    files: dict[str, bytes] = {}
    paths: list[str] = []
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.GNU_FORMAT) as t:
        def add(name: str, data: bytes | None = None, link: str | None = None) -> None:
            info = tarfile.TarInfo(name)
            if link is not None:
                info.type, info.linkname = tarfile.SYMTYPE, link
            elif data is None:
                info.type = tarfile.DIRTYPE
            else:
                info.size = len(data)
            t.addfile(info, io.BytesIO(data) if data is not None else None)

        for i, (content, diff_id) in enumerate(zip(contents, diff_ids)):
            v1 = f"{i + 1:064x}"
            hexid = diff_id.split(":")[1]
            first = diff_ids.index(diff_id) < i
            if layout == "podman":
                if not first:
                    add(f"{hexid}.tar", content)
                    files[f"{hexid}.tar"] = content
                add(f"{v1}/")
                add(f"{v1}/layer.tar", link=f"../{hexid}.tar")
                paths.append(f"{hexid}.tar")
            else:
                add(f"{v1}/")
                if first:
                    add(f"{v1}/layer.tar", link=f"../{1:064x}/layer.tar")
                else:
                    add(f"{v1}/layer.tar", content)
                    files[f"{v1}/layer.tar"] = content
                paths.append(f"{v1}/layer.tar")
            add(f"{v1}/VERSION", b"1.0")
        add("c" * 64 + ".json", json.dumps({"rootfs": {"type": "layers", "diff_ids": diff_ids}}).encode())
        add("manifest.json", json.dumps([{"Config": "c" * 64 + ".json", "RepoTags": ["x:1"], "Layers": paths}]).encode())
        if layout == "docker":
            add("repositories", b'{"x": {"1": "' + b"3" * 64 + b'"}}')
    return buf.getvalue(), diff_ids, files


@pytest.mark.parametrize("layout", ["docker", "podman"])
def test_the_tarfile_reader_passes_a_save_archive_through_and_leaves_out_a_layer(layout):
    archive, diff_ids, files = _save_archive(layout)
    base = next(p for p, c in files.items() if "sha256:" + hashlib.sha256(c).hexdigest() == diff_ids[0])
    out, src = io.BytesIO(), io.BytesIO(archive + bytes(20480))
    summary = transfer.copy_archive(src, out.write, drop=lambda m: m.path == base, capture=["manifest.json"])
    assert summary.complete and summary.tar_bytes == len(out.getvalue())
    assert src.tell() == len(src.getvalue())  # read to the end: the writer is never left on a closed pipe
    assert summary.dropped == {base: diff_ids[0]}  # the digest of an uncompressed layer file is its diff ID
    assert json.loads(summary.captured["manifest.json"])[0]["RepoTags"] == ["x:1"]
    with tarfile.open(fileobj=io.BytesIO(archive)) as before, tarfile.open(fileobj=io.BytesIO(out.getvalue())) as after:
        assert after.getnames() == [n for n in before.getnames() if n != base]
        for member in after.getmembers():
            original = before.getmember(member.name)
            assert (member.type, member.linkname, member.size) == (original.type, original.linkname, original.size)
            if member.isreg():
                assert after.extractfile(member).read() == before.extractfile(original).read()
    layers = transfer.stream.layer_records(diff_ids, summary)
    assert [layer.shipped for layer in layers] == [False, True, False]  # the repeated base is left out too
    assert [layer.chain_id for layer in layers] == transfer.chain_ids(diff_ids)
    assert layers[1].size == 10240 and layers[1].digest == diff_ids[1]
    assert summary.layout == "docker-legacy"


def test_the_tarfile_reader_tells_a_broken_off_stream_from_a_finished_one():
    archive, _, _ = _save_archive("docker")
    with tarfile.open(fileobj=io.BytesIO(archive)) as t:
        members = t.getmembers()
        at_boundary = members[-1].offset  # the stream stops cleanly between two members
    summary = transfer.copy_archive(io.BytesIO(archive[:at_boundary]), lambda b: None, drop=lambda m: False)
    assert not summary.complete and "repositories" not in summary.members
    assert transfer.copy_archive(io.BytesIO(archive), lambda b: None, drop=lambda m: False).complete


def test_the_tarfile_reader_refuses_what_is_not_a_tar_archive():
    with pytest.raises(TransferError, match=r"`podman save` wrote something that is not a tar archive"):
        transfer.copy_archive(io.BytesIO(b"{" * 4096), lambda b: None, drop=lambda m: False, command="podman save")


# ---------------------------------------------------------------- importers, by --to


def test_an_unknown_to_is_refused_in_one_sentence_naming_the_choices(tmp_path):
    with pytest.raises(TransferError) as e:
        transfer.import_bundle(tmp_path / "no-such-bundle", to="tarball")
    message = str(e.value)
    assert message.startswith("--to tarball is not known") and message.endswith(".")
    assert ". " not in message and message.count(".") == 1  # one sentence
    for choice in ("sif", "sqsh", "docker", "podman"):
        assert choice in message
    assert set(transfer.IMPORTERS) == {None, "docker", "podman", "sif", "sqsh"}


def test_without_an_engine_the_refusal_names_the_conversion_that_needs_none(app_bundle_stub):
    class Down(engine.Docker):
        def answers(self) -> bool:
            return False

        def problem(self) -> str:
            return "cannot reach a Docker engine at unix:///nowhere; start one."

    with pytest.raises(EngineError, match=r"; start one; without a Docker daemon, import with --to sif \(Apptainer\)"):
        transfer.import_bundle(app_bundle_stub, engine=Down())


def test_podman_is_not_handed_a_delta_bundle(app_bundle_stub):
    from fake_engine import fake

    manifest = json.loads((app_bundle_stub / "manifest.json").read_text())
    manifest["layers"][0]["shipped"] = False
    (app_bundle_stub / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(TransferError, match="delta bundle and podman loads only complete archives"):
        transfer.import_bundle(app_bundle_stub, engine=fake("podman"))


# ---------------------------------------------------------------- the receiver, by doctor's rules


def test_check_target_uses_doctors_minor_version_rule():
    # CUDA 12.4 runs on drivers from 525.60.13 through minor-version compatibility (docker/matrix.toml).
    mvc = [f.message for f in transfer.check_target(LABELS, _fingerprint("530.30.02", "9.0")) if f.severity == compat.WARN]
    assert len(mvc) == 1 and "only through minor-version compatibility" in mvc[0]
    old = [f.message for f in transfer.check_target(LABELS, _fingerprint("470.57.02", "9.0")) if f.severity == compat.WARN]
    assert len(old) == 1 and "upgrade the driver there" in old[0]


# ---------------------------------------------------------------- through the engine


def _docker(*args: str, check: bool = True) -> proc.Result:
    return proc.run(["docker", *args], check=check)


def _build(tag: str, folder: Path, dockerfile: str) -> str:
    (folder / "Dockerfile").write_text(dockerfile)
    # The legacy builder needs no buildx plugin, and its layers are not kept alive by a build
    # cache, so removing a test image really removes its layers.
    proc.run(["docker", "build", "-q", "-t", tag, str(folder)], env={"DOCKER_BUILDKIT": "0"})
    return _image_id(tag)


def _image_id(ref: str) -> str | None:
    result = _docker("image", "inspect", "--format", "{{.Id}}", ref, check=False)
    return result.stdout.strip() if result.ok else None


def _rmi(*refs: str) -> None:
    for ref in refs:
        _docker("rmi", ref, check=False)


@pytest.fixture(scope="module")
def images(docker_client, tmp_path_factory):
    """Tags of a tiny base, an app image on it (two tags, labels), and an unrelated 40 MB image."""
    run = uuid.uuid4().hex[:8]
    t = {name: f"kltest-transfer-{run}-{name}" for name in ("base", "app", "app2", "big")}
    t["app:other"] = f"{t['app']}:other"
    work = tmp_path_factory.mktemp("images")
    (work / "root" / "etc").mkdir(parents=True)
    (work / "root" / "etc" / "hello").write_text("hello\n")
    (work / "root" / "rand").write_bytes(os.urandom(200_000))
    tree = subprocess.run(["tar", "-C", str(work / "root"), "-c", "."], capture_output=True, check=True).stdout
    proc.run(["docker", "import", "-", t["base"]], input=tree)
    ctx = work / "ctx"
    ctx.mkdir()
    (ctx / "a").write_bytes(os.urandom(300_000) + b"x" * 300_000)
    (ctx / "b").write_bytes(os.urandom(100_000))
    (ctx / "big").write_bytes(os.urandom(40 << 20))
    _build(t["app"], ctx, f"FROM {t['base']}\nCOPY a /a\nCOPY b /b\n"
                          'LABEL kernellab.cuda="12.4" kernellab.lock-sha256="abc123" kernellab.arch-list="9.0"\n')
    _docker("tag", t["app"], t["app:other"])
    _build(t["big"], ctx, "FROM scratch\nCOPY big /big\n")  # shares no layer with the others
    yield t
    _rmi(*(ref for name, ref in t.items() if name != "app"), t["app"])


def _inspect(ref: str) -> dict:
    return json.loads(_docker("image", "inspect", ref).stdout)[0]


@pytest.fixture(scope="module")
def app_bundle(images, tmp_path_factory):
    """A full bundle of the app image, cut into small chunks so there are several."""
    return transfer.export_image(images["app"], tmp_path_factory.mktemp("bundles"), chunk_size="64k")


def _unload(images) -> None:
    _rmi(images["app:other"], images["app"])
    assert _image_id(images["app"]) is None


@pytest.mark.docker
def test_round_trip_keeps_image_id_tags_and_labels(images, app_bundle):
    before = _inspect(images["app"])
    manifest = transfer.read_manifest(app_bundle)
    assert len(manifest.chunks) > 2
    assert manifest.image.labels["kernellab.lock-sha256"] == "abc123"
    assert [layer.diff_id for layer in manifest.layers] == before["RootFS"]["Layers"]
    assert (app_bundle / "README.txt").read_text().count(app_bundle.name) >= 1
    _unload(images)

    result = transfer.import_bundle(app_bundle)

    after = _inspect(images["app"])
    assert result.image_id == after["Id"] == before["Id"]
    assert sorted(after["RepoTags"]) == sorted(before["RepoTags"]) == sorted([images["app"] + ":latest",
                                                                              images["app:other"]])
    assert after["Config"]["Labels"] == before["Config"]["Labels"]


@pytest.mark.docker
@pytest.mark.parametrize("damage, word", [("flip", "corrupt"), ("delete", "missing"), ("truncate", "truncated")])
def test_a_damaged_chunk_is_named_and_nothing_is_loaded(images, app_bundle, tmp_path, damage, word):
    bundle = tmp_path / app_bundle.name
    shutil.copytree(app_bundle, bundle)
    chunk = bundle / "image.tar.zst.001"
    good = chunk.read_bytes()
    if damage == "flip":
        chunk.write_bytes(good[:1000] + bytes([good[1000] ^ 0x01]) + good[1001:])
    elif damage == "delete":
        chunk.unlink()
    else:
        chunk.write_bytes(good[:len(good) // 3])
    _unload(images)

    with pytest.raises(TransferError, match=rf"1 of \d+ chunks .* image\.tar\.zst\.001 \({word}") as e:
        transfer.import_bundle(bundle)
    assert "nothing was loaded" in str(e.value)
    assert "image.tar.zst.000" not in str(e.value)
    assert _image_id(images["app"]) is None

    chunk.write_bytes(good)  # copy only the named chunk again: the import now goes through
    assert transfer.import_bundle(bundle).image_id == _image_id(images["app"])


@pytest.mark.docker
def test_a_manifest_from_another_bundle_is_recognised(images, app_bundle, tmp_path):
    other = transfer.export_image(images["big"], tmp_path / "other", chunk_size="64k")
    bundle = tmp_path / "mixed"
    shutil.copytree(app_bundle, bundle)
    shutil.copy(other / "manifest.json", bundle / "manifest.json")
    with pytest.raises(TransferError, match="belongs to another bundle"):
        transfer.import_bundle(bundle)


@pytest.mark.docker
def test_cli_failure_is_one_line_and_non_zero(app_bundle, tmp_path):
    bundle = tmp_path / app_bundle.name
    shutil.copytree(app_bundle, bundle)
    (bundle / "image.tar.zst.000").unlink()
    p = subprocess.run([sys.executable, "-m", "invoke", "import-image", str(bundle)], cwd=ROOT,
                       capture_output=True, text=True, check=False)
    assert p.returncode == 1
    assert "Traceback" not in p.stderr
    assert p.stderr.strip().splitlines()[-1].startswith("kernellab: 1 of ")


@pytest.mark.docker
def test_cli_round_trip_takes_the_image_and_the_bundle_as_positionals(images, tmp_path):
    out = tmp_path / "out"
    p = subprocess.run([sys.executable, "-m", "invoke", "export-image", images["app"], "--output", str(out),
                        "--chunk-size", "64k"], cwd=ROOT, capture_output=True, text=True, check=False)
    assert p.returncode == 0, p.stderr
    (bundle,) = [d for d in out.iterdir() if d.is_dir()]
    p = subprocess.run([sys.executable, "-m", "invoke", "import-image", str(bundle)], cwd=ROOT,
                       capture_output=True, text=True, check=False)
    assert p.returncode == 0, p.stderr


@pytest.mark.docker
@pytest.mark.slow
def test_delta_bundle_is_smaller_and_loads_where_the_old_image_is(images, app_bundle, tmp_path, monkeypatch):
    ctx = tmp_path / "ctx"
    ctx.mkdir()
    # The new layer rewrites /b with as many bytes: its layer file has the very size of an old
    # one, so the export must notice the content differs and ship it after all.
    (ctx / "b").write_bytes(os.urandom(100_000))
    new_id = _build(images["app2"], ctx, f"FROM {images['app']}\nCOPY b /b\n")
    full = transfer.export_image(images["app2"], tmp_path / "full")
    saves = []
    real_pipe_from = proc.pipe_from
    monkeypatch.setattr(proc, "pipe_from", lambda argv, **kw: saves.append(argv) or real_pipe_from(argv, **kw))
    delta = transfer.export_image(images["app2"], tmp_path / "delta", since=app_bundle / "manifest.json")
    assert len(saves) == 2  # the first pass left out the same-size stranger, the second kept it
    full_m, delta_m = transfer.read_manifest(full), transfer.read_manifest(delta)
    assert delta_m.stream.compressed * 5 < full_m.stream.compressed
    assert [layer.shipped for layer in delta_m.layers] == [False, False, False, True]
    assert delta_m.delta.since == transfer.read_manifest(app_bundle).image.id

    _rmi(images["app2"])  # the receiver has the old image (app) but not the new one
    assert transfer.import_bundle(delta).image_id == new_id == _image_id(images["app2"])

    # A receiver without the old image is refused before anything is loaded.
    _rmi(images["app2"], images["app:other"], images["app"], images["base"])
    with pytest.raises(TransferError, match="delta bundle leaves out 3 layer.*import the bundle of"):
        transfer.import_bundle(delta)
    assert _image_id(images["app2"]) is None
    transfer.import_bundle(app_bundle)  # put the app image back for the tests that follow


@pytest.mark.docker
def test_since_an_unrelated_manifest_is_refused(images, app_bundle, tmp_path):
    other = transfer.export_image(images["big"], tmp_path / "big")
    with pytest.raises(TransferError, match="shares no layers"):
        transfer.export_image(images["app"], tmp_path / "out", since=other)
    assert not (tmp_path / "out").exists() or list((tmp_path / "out").iterdir()) == []


@pytest.fixture
def small_disk(tmp_path):
    """A 20 MB tmpfs, unmounted afterwards."""
    mount = tmp_path / "small"
    mount.mkdir()
    if os.geteuid() != 0 or not proc.which("mount"):
        pytest.skip("needs root and mount(8) to mount a small tmpfs (CI runs as root)")
    result = proc.run(["mount", "-t", "tmpfs", "-o", "size=20m", "tmpfs", str(mount)], check=False)
    if not result.ok:
        pytest.skip(f"cannot mount a tmpfs here ({result.stderr.strip()}); run as root outside a restricted container")
    yield mount
    proc.run(["umount", str(mount)])


@pytest.mark.docker
def test_a_full_disk_fails_cleanly_and_leaves_nothing(images, small_disk):
    with pytest.raises(TransferError, match="filled up"):
        transfer.export_image(images["big"], small_disk / "bundles")
    assert [p.name for p in (small_disk / "bundles").iterdir()] == []


@pytest.mark.docker
def test_an_interrupted_export_leaves_no_bundle(images, tmp_path):
    def interrupt(phase, done, total):
        if done > 5 << 20:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        transfer.export_image(images["big"], tmp_path, chunk_size="1M", progress=interrupt)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.docker
def test_sif_conversion_feeds_apptainer_a_docker_archive(images, app_bundle, tmp_path, monkeypatch):
    # A stand-in apptainer that checks what it is given: `build OUT docker-archive:TAR`.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "apptainer"
    fake.write_text("#!/bin/sh\n[ \"$1\" = build ] || exit 2\ntar=${3#docker-archive:}\n"
                    "tar -tf \"$tar\" manifest.json >/dev/null || exit 3\necho SIF > \"$2\"\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    out = tmp_path / "out" / "app.sif"

    result = transfer.import_bundle(app_bundle, to="sif", output=out)

    assert result.output == out and out.read_text() == "SIF\n"
    assert sorted(p.name for p in out.parent.iterdir()) == ["app.sif"]  # the unpacked archive is gone


def test_conversion_names_what_to_install(app_bundle_stub, monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(TransferError, match="install Apptainer"):
        transfer.import_bundle(app_bundle_stub, to="sif")
    with pytest.raises(TransferError, match="enroot is not installed"):
        transfer.import_bundle(app_bundle_stub, to="sqsh")


@pytest.fixture
def app_bundle_stub(tmp_path):
    """A manifest-only bundle: enough for checks that happen before any chunk is read."""
    manifest = {"format": transfer.FORMAT, "image": {"id": "sha256:" + "0" * 64, "tags": []},
                "layers": [{"diff_id": "sha256:1", "chain_id": "sha256:1", "shipped": True}],
                "chunks": [], "stream": {"tar_bytes": 0, "bytes": 0}}
    (tmp_path / "manifest.json").write_text(json.dumps(manifest))
    return tmp_path
