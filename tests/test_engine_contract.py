"""The engine contract, one suite for every engine: real Docker and real rootless Podman.

Each test takes an `eng` parameter (docker, podman) and does what users do through kernellab's
own functions: build the cpu target, run as a non-root UID writing into a mount, export and
import a bundle, `invoke shell --cmd` with shell syntax. Podman runs rootless (as a normal user
with subuids); as root the podman cases skip, or fail where KERNELLAB_REQUIRE_PODMAN=1
(`.ci/podman-suite.sh` runs them as a non-root user in CI).
"""
from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys
import time
import uuid
from typing import Iterator

import pytest

from conftest import committed_locks
from kernellab import ROOT, engine, transfer
from kernellab.container import runner
from kernellab.image import builder, network

ENGINES = [pytest.param("docker", marks=pytest.mark.docker), pytest.param("podman", marks=pytest.mark.podman)]
pytestmark = [pytest.mark.slow]


@pytest.fixture(scope="module", params=ENGINES)
def eng(request) -> engine.Engine:
    found = engine.by_name(request.param)
    base_archive = os.environ.get("KERNELLAB_BASE_ARCHIVE")
    base = "kernellab-base:debian-bookworm"
    if base_archive and not found.exists(base):
        # A rootless user cannot debootstrap; CI hands over the root-made base as a save archive.
        with open(base_archive, "rb") as f, found.load() as pipe:
            while chunk := f.read(1 << 20):
                pipe.write(chunk)
    return found


@pytest.fixture(scope="module")
def staged(eng) -> Iterator[list[str]]:
    """The staging names this module's builds take (CI's other lane may be building beside it, under its own)."""
    names: list[str] = []
    own = eng.staging

    @contextlib.contextmanager
    def recorded() -> Iterator[str]:
        with own() as ref:
            names.append(ref)
            yield ref

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(eng, "staging", recorded)
        yield names


@pytest.fixture(scope="module")
def built(eng, staged, tmp_path_factory) -> builder.Built:
    spec = builder.resolve_request(target="cpu")
    return builder.build(spec, lock="prefer", lock_dir=committed_locks(tmp_path_factory),
                        ca_certs=network.ca_certificates(),
                        out=io.StringIO(), engine=eng)


def _all_tags(eng: engine.Engine) -> list[str]:
    """Every name of every image the engine holds (as Docker spells them)."""
    return [t for i in eng.inspect_many(eng.image_ids()) for t in i.get("RepoTags") or []]


def _non_root_user(eng: engine.Engine) -> tuple[int, int]:
    # Rootless Podman maps only the caller's own UID to itself; as root (Docker) any UID shows.
    return (os.getuid(), os.getgid()) if os.geteuid() != 0 else (4321, 4321)


def test_the_cpu_target_builds_with_its_labels_and_lock(eng, built):
    labels = eng.labels(built.tags[0])
    assert labels["kernellab.kind"] == "cpu" and labels["kernellab.lock-sha256"] == built.lock_sha256
    assert eng.image_id("kernellab:cpu") == built.image_id
    lock = json.loads(built.lock_file.read_text())
    assert any(line.startswith("torch==") for line in lock["pip_freeze"])


def test_a_container_runs_as_a_non_root_uid_and_its_files_in_the_mount_are_that_users(eng, built, tmp_path,
                                                                                     monkeypatch):
    monkeypatch.setenv("KERNELLAB_CACHE", str(tmp_path / "cache"))
    repo = tmp_path / "repo"
    repo.mkdir()
    uid, gid = _non_root_user(eng)
    if os.geteuid() == 0:
        os.chown(repo, uid, gid)
    code = runner.run(built.tags[0], ["bash", "-c", "id -u > /workspace/uid && mkdir -p /workspace/d/e"],
                          gpu=False, user=(uid, gid), repo=repo, engine=eng)
    assert code == 0
    assert (repo / "uid").read_text().strip() == str(uid)
    for made in (repo / "uid", repo / "d", repo / "d" / "e"):
        assert (made.stat().st_uid, made.stat().st_gid) == (uid, gid), made


def test_an_exported_bundle_imports_back_as_the_same_image(eng, built, tmp_path):
    # A child of the built image that nothing else uses, so it can be deleted whole and come back.
    ref = f"kernellab-roundtrip:{uuid.uuid4().hex[:8]}"
    (tmp_path / "ctx").mkdir()
    (tmp_path / "ctx" / "Dockerfile").write_text(f"FROM {built.tags[0]}\nLABEL kernellab.test={ref}\n")
    argv, env = eng.build_argv(tmp_path / "ctx", iidfile=tmp_path / "iid", tags=[ref], network="none")
    subprocess.run(argv, env={**os.environ, **env}, check=True, capture_output=True)
    image_id = eng.image_id(ref)
    bundle = transfer.export_image(ref, tmp_path / "bundle", engine=eng)
    eng.remove_image(image_id)
    assert not eng.exists(image_id) and not eng.exists(ref), "the image itself is gone, not just a tag"
    transfer.import_bundle(bundle, engine=eng)
    try:
        assert eng.image_id(ref) == image_id and eng.labels(ref)["kernellab.test"] == ref
    finally:
        eng.remove_image(image_id)


def test_a_build_leaves_no_staging_tag_behind(eng, built, staged):
    tags = _all_tags(eng)
    assert staged and staged[0].startswith("kernellab-staging:") and not set(staged) & set(tags)
    assert built.tags[0] in tags, "names read as Docker's (no localhost/ prefix)"


def test_a_prune_between_the_build_and_its_tags_loses_nothing(eng, built, staged, tmp_path_factory, monkeypatch):
    # CI's lanes prune dangling images beside each other's builds: a built image must never be left untagged.
    describe = builder._envinfo

    def prune_then_describe(e: engine.Engine, image: str) -> dict:
        subprocess.run([*e.command, "image", "prune", "-f"], check=True, capture_output=True)
        return describe(e, image)

    monkeypatch.setattr(builder, "_envinfo", prune_then_describe)
    again = builder.build(builder.resolve_request(target="cpu"), lock="prefer",
                          lock_dir=committed_locks(tmp_path_factory), ca_certs=network.ca_certificates(),
                          out=io.StringIO(), engine=eng)
    assert eng.image_id("kernellab:cpu") == again.image_id
    assert eng.labels(again.image_id)["kernellab.lock-sha256"] == again.lock_sha256
    tags = _all_tags(eng)
    assert len(staged) >= 2 and not set(staged) & set(tags)


def test_a_staging_name_is_dropped_even_while_a_container_of_it_still_runs(eng, built, tmp_path):
    # Ctrl-C during the lock's probe: the probe's container outlives the build for a moment, and the image's only
    # name (Docker refuses to drop it unforced while a container uses the image) must still go.
    (tmp_path / "ctx").mkdir()
    (tmp_path / "ctx" / "Dockerfile").write_text(f"FROM {built.tags[0]}\nLABEL kernellab.test=staging-in-use\n")
    with eng.staging() as ref:
        argv, env = eng.build_argv(tmp_path / "ctx", iidfile=tmp_path / "iid", tags=[ref], network="none")
        subprocess.run(argv, env={**os.environ, **env}, check=True, capture_output=True)
        image_id = eng.image_id(ref)
        name = f"kl-staging-in-use-{uuid.uuid4().hex[:8]}"
        sleeper = subprocess.Popen(
            eng.run_argv(ref, ["120"], user=(0, 0), network="none", entrypoint="sleep", name=name, init=False,
                         shm_size=None), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for _ in range(240):  # until its container runs (no time is asserted)
            state = subprocess.run([*eng.command, "container", "inspect", "-f", "{{.State.Running}}", name],
                                   capture_output=True, text=True)
            if state.stdout.strip() == "true":
                break
            time.sleep(0.5)
        else:
            pytest.fail(f"the container {name} never ran")
    try:
        tags = _all_tags(eng)
        assert ref not in tags and eng.image_id("kernellab:cpu") == built.image_id
    finally:
        subprocess.run([*eng.command, "rm", "-f", name], capture_output=True, check=False)
        sleeper.wait(timeout=60)
        eng.remove_image(image_id)


def test_shell_cmd_runs_through_a_shell_in_the_container(eng, built, tmp_path):
    env = {**os.environ, "KERNELLAB_CACHE": str(tmp_path / "cache")}
    env.pop("KERNELLAB_ENGINE", None)  # the flag alone must choose the engine
    r = subprocess.run([sys.executable, "-m", "invoke", "shell", "--engine", eng.name, "--image", built.tags[0],
                        "--gpu-mode", "none",
                        "--cmd", "cd /tmp && echo made > f && cat f && test -n \"$HOME\""],
                       cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().splitlines()[-1] == "made"

