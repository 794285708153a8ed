"""`invoke recipe profile demo` for real: the demo's image (cpu target, cached after `make`), the host's Nsight
Systems mounted read-only into its container, one capture of the first case; and the refusal of an nsys whose report
importer is missing, made in the container before anything is captured."""
from __future__ import annotations

import io
import json
import os
import shutil
import subprocess

import pytest

from kernellab import engine
from kernellab.errors import ProfileError
from kernellab.nsight import tools
from kernellab.places import Flags
from kernellab.recipes import profile as profiles
from test_recipe_profile import real_nsys

NO_GPU = Flags(gpu_mode="none")  # a run without a GPU

pytestmark = [pytest.mark.docker, pytest.mark.slow]
SECRET = "planted-secret-123"


@pytest.fixture
def docker(monkeypatch):
    monkeypatch.setenv("KERNELLAB_GPU_MODE", "none")
    engine.select("docker")
    return engine.by_name("docker")


def test_the_demos_first_case_is_captured_with_its_os_calls_and_no_secret_of_the_callers(docker, tmp_path, monkeypatch):
    exe = real_nsys()
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET)
    folder = profiles.profile("demo", where=NO_GPU, seconds=120, results=tmp_path / "results", engine=docker,
                              out=io.StringIO())
    assert folder.parent == tmp_path / "results" / "demo" / "profiles" and folder.name.endswith("-blocked-n2048")
    assert not list(folder.parent.glob("*.partial")), "the .partial folder was renamed"
    summary = (folder / "summary.md").read_text()
    assert "## OS runtime calls" in summary and "## NVTX ranges" in summary and "traced: nvtx, osrt" in summary
    assert "CUDA was not traced (a CPU case)" in summary and "capture limited to 120 s" in summary
    assert "mismatches: 0" in summary, "the case's own output tail"
    doc = json.loads((folder / "profile.json").read_text())
    assert doc["nsys"]["version"] and doc["nsys"]["schema"].split(".")[0] in ("2", "3")
    assert doc["image"]["tag"].startswith("kernellab-recipe:") and doc["image"]["recipe_manifest_sha256"]
    assert set(doc["sources"]) == {"transpose", "minibench"} and doc["machine"]["driver"] is None
    assert doc["command"] == "./build/transpose blocked 2048 32" and doc["seconds_limit"] == 120
    assert (folder / "timeline.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    report = folder / "blocked-n2048.nsys-rep"
    assert report.is_file() and not (folder / "blocked-n2048.sqlite").exists()
    db = tmp_path / "check.sqlite"
    subprocess.run([str(exe), "export", "--type", "sqlite", "--output", str(db), str(report)], check=True,
                   capture_output=True, timeout=120)
    assert db.stat().st_size > 0 and SECRET.encode() not in db.read_bytes()
    assert SECRET.encode() not in report.read_bytes()


def test_an_nsys_without_its_report_importer_is_refused_in_the_container_and_leaves_no_folder(docker, tmp_path,
                                                                                             monkeypatch):
    exe = real_nsys()
    prefix = tools.install_folder(exe)
    copy = tmp_path / "nsys-copy"
    try:
        shutil.copytree(prefix, copy, symlinks=True, copy_function=os.link)
    except OSError:  # another file system: a real copy
        shutil.rmtree(copy, ignore_errors=True)
        shutil.copytree(prefix, copy, symlinks=True)
    for importer in copy.glob("*/QdstrmImporter"):
        importer.unlink()
    monkeypatch.setenv("KERNELLAB_NSYS", str(copy / exe.resolve().relative_to(prefix)))
    with pytest.raises(ProfileError, match="has no report importer"):
        profiles.profile("demo", where=NO_GPU, results=tmp_path / "results", engine=docker, out=io.StringIO())
    assert not any((tmp_path / "results" / "demo" / "profiles").iterdir()), "nothing half-done is left"
