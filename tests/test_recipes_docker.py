"""Recipes against a real Docker engine: a small paper repository (made by the test, reached through an insteadOf
mirror) built on the cpu target's image, step by step, then run and judged. No network, no GPU.

Builds: the recipe's image on `kernellab:cpu` (which `make` built; built here if missing): two one-line steps,
so each build is seconds; the build cache is what is tested (unchanged, resumed after a failing step)."""
from __future__ import annotations

import io
import json
import shutil
import time
from pathlib import Path

import pytest

from kernellab import engine
from kernellab.errors import BuildError, RecipeError
from kernellab.places import Container, Flags
from kernellab.recipes import build, read, reproduce
from recipe_fixtures import make_mirror, make_wheel, mirror_env, write_recipe

NO_GPU = Flags(gpu_mode="none")  # a run without a GPU

pytestmark = [pytest.mark.docker, pytest.mark.slow]
DOCKER = engine.by_name("docker")


@pytest.fixture
def paper(tmp_path, monkeypatch):
    commits = make_mirror(tmp_path)
    mirror_env(tmp_path, monkeypatch)
    monkeypatch.setenv("KERNELLAB_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("KERNELLAB_GPU_MODE", "none")
    engine.select("docker")
    return tmp_path, commits


def _stamp(image: str) -> str:
    from kernellab import proc

    argv = DOCKER.run_argv(image, ["cat", "/src/stamp"], user=(0, 0), network="none", init=False, shm_size=None)
    return proc.run(argv).stdout.strip()


def test_a_recipe_builds_each_step_as_a_layer_and_an_unchanged_rebuild_builds_nothing(paper):
    root, commits = paper
    recipe = read.load(str(write_recipe(root / "r" / "fastop", commits)))
    first = build.build(recipe, engine=DOCKER, out=io.StringIO())
    assert not first.cached
    labels = DOCKER.labels(first.image_id)
    assert labels["kernellab.recipe"] == "fastop" and labels["kernellab.recipe-sha256"] == first.env.build_hash
    assert json.loads(labels["kernellab.recipe-sources"]) == {
        "fastop": {"commit": commits["paper"], "submodules": {"third/helper": commits["helper"]}}}
    assert json.loads(labels["kernellab.recipe-patches"]) == {"speed.diff": recipe.patches[0].sha256}
    start = time.monotonic()
    again = build.build(recipe, engine=DOCKER, out=io.StringIO())
    assert again.cached and again.image_id == first.image_id
    assert time.monotonic() - start < 30  # generous for a loaded CI machine; benchmarks/recipes.py measures it


APPENDED_STEP = """
[[steps]]
name = "after"
run = "echo appended > /src/after"
"""


def test_an_appended_step_reruns_none_before_it_and_the_name_tag_follows_a_revert(paper):
    root, commits = paper
    folder = write_recipe(root / "r" / "fastop", commits)
    first = build.build(read.load(str(folder)), engine=DOCKER, out=io.StringIO())
    longer = build.build(read.load(str(write_recipe(folder, commits, extra=APPENDED_STEP))), engine=DOCKER,
                         out=io.StringIO())
    assert not longer.cached and _stamp(longer.image_id) == _stamp(first.image_id), "step 1 came from the cache"
    assert DOCKER.image_id("kernellab-recipe:fastop") == longer.image_id
    reverted = build.build(read.load(str(write_recipe(folder, commits))), engine=DOCKER, out=io.StringIO())
    assert reverted.cached and reverted.image_id == first.image_id
    assert DOCKER.image_id("kernellab-recipe:fastop") == first.image_id, "the name tag names the image it says"


def test_two_runs_started_in_the_same_second_both_keep_their_records(paper, tmp_path, monkeypatch):
    import threading

    root, commits = paper
    folder = write_recipe(root / "r" / "fastop", commits)
    build.build(read.load(str(folder)), engine=DOCKER, out=io.StringIO())
    monkeypatch.setattr(time, "strftime", lambda fmt, *a: "20261125-120000" if "%Y" in fmt else "x")
    runs: dict[str, object] = {}

    def run(k: str) -> None:
        try:
            runs[k] = reproduce.run(str(folder), k=k, quick=True, where=NO_GPU, results=tmp_path / "results",
                                engine=DOCKER, out=io.StringIO())[0]
        except BaseException as e:  # noqa: BLE001  (asserted below)
            runs[k] = e

    threads = [threading.Thread(target=run, args=(k,)) for k in ("fastop", "baseline")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(isinstance(v, Path) for v in runs.values()), runs
    assert runs["fastop"] != runs["baseline"]
    for k, where in runs.items():
        data = json.loads((where / "run.json").read_text())  # type: ignore[operator]
        assert [c["experiment"] for c in data["cases"]] == [k], "each record holds its own run's cases only"


@pytest.mark.full   # about 30 s of pip resolving twice: make test's room (docs/testing.md, 2026-11-27)
def test_the_recipe_lock_pins_its_pip_packages_and_update_resolves_them_again(paper):
    root, commits = paper
    wheels = root / "wheels"
    make_wheel(wheels, "klpin", "1.0")
    folder = write_recipe(root / "r" / "fastop", commits, pip=("klpin>=1.0",))
    recipe = read.load(str(folder))
    first = build.build(recipe, wheelhouse=wheels, engine=DOCKER, out=io.StringIO())
    lock_file = folder / "locks" / "cpu.json"
    assert json.loads(lock_file.read_text())["pip"] == {"klpin": "1.0"}
    assert build.pip_added(first.image_id, DOCKER) == {"klpin": "1.0"}
    # The first lock changed nothing a step depends on: a step appended afterwards reruns none before it.
    longer = build.build(read.load(str(write_recipe(folder, commits, pip=("klpin>=1.0",), extra=APPENDED_STEP))),
                         wheelhouse=wheels, engine=DOCKER, out=io.StringIO())
    assert _stamp(longer.image_id) == _stamp(first.image_id), "step 1 came from the cache"
    write_recipe(folder, commits, pip=("klpin>=1.0",))
    # A newer release appears; the lock (not the index) decides what a rebuild installs.
    make_wheel(wheels, "klpin", "1.1")
    again = build.build(read.load(str(folder)), wheelhouse=wheels, no_cache=True, engine=DOCKER, out=io.StringIO())
    assert build.pip_added(again.image_id, DOCKER) == {"klpin": "1.0"}
    # Writing the lock changed nothing the image is made from: an unchanged rebuild is still cached.
    assert build.build(read.load(str(folder)), engine=DOCKER, out=io.StringIO()).cached
    out = io.StringIO()
    updated = build.build(read.load(str(folder)), wheelhouse=wheels, locking="update", engine=DOCKER, out=out)
    assert build.pip_added(updated.image_id, DOCKER) == {"klpin": "1.1"}
    assert json.loads(lock_file.read_text())["pip"] == {"klpin": "1.1"} and "locked" in out.getvalue()
    # --locked with a pip list the lock was not written for: one sentence, nothing built.
    changed = read.load(str(write_recipe(folder, commits, pip=("klpin>=1.1", "other"))))
    with pytest.raises(RecipeError, match=r"--locked: .*locks/cpu.json was written for pip \['klpin>=1.0'\]"):
        build.build(changed, wheelhouse=wheels, locking="strict", engine=DOCKER, out=io.StringIO())


def test_a_failing_step_is_named_with_its_log_and_the_next_build_resumes_there(paper):
    root, commits = paper
    folder = write_recipe(root / "r" / "fastop", commits, step2="echo compiling; exit 7")
    recipe = read.load(str(folder))
    with pytest.raises(BuildError) as e:
        build.build(recipe, engine=DOCKER, out=io.StringIO())
    msg = str(e.value)
    assert "recipe fastop: step 2 (build) failed" in msg and "compiling" in msg
    assert "invoke recipe shell fastop --step 2" in msg and "Full log: " in msg
    log = msg.split("Full log: ")[1].split(". Last lines")[0]
    assert "kernellab-step 2 build" in open(log).read()
    assert not DOCKER.exists(f"kernellab-recipe:cpu-{build.environment(recipe, engine=DOCKER).build_hash[:12]}")
    # The state before step 2 exists (what `recipe shell --step 2` starts) and keeps step 1's stamp.
    before = build.build(recipe, upto=2, engine=DOCKER, out=io.StringIO())
    stamp = _stamp(before.image_id)
    write_recipe(root / "r" / "fastop", commits)  # the fix
    fixed = build.build(read.load(str(folder)), engine=DOCKER, out=io.StringIO())
    assert _stamp(fixed.image_id) == stamp  # step 1 was not run again: the build resumed at step 2


def test_a_recipe_run_judges_its_claims_and_writes_one_record(paper, tmp_path):
    root, commits = paper
    folder = write_recipe(root / "r" / "fastop", commits)
    run, verdicts, cases = reproduce.run(str(folder), where=NO_GPU, results=tmp_path / "results", engine=DOCKER,
                                     out=io.StringIO())
    assert [c.metrics["time_ms"] for c in cases] == [20.0, 40.0, 100.0, 200.0]  # the patch made SPEED 5
    assert [(v.claim, v.verdict) for v in verdicts] == [("n10 speedup", "reproduced"), ("n20 speedup", "not reproduced")]
    data = json.loads((run / "run.json").read_text())
    assert data["sources"]["fastop"]["submodules"] == {"third/helper": commits["helper"]}
    assert data["image"]["recipe_sha256"] and data["machine"]["kernellab_commit"]
    assert (data["planned"], data["stopped_early"]) == (4, False)
    assert all(r["exit_code"] == 0 for c in data["cases"] for r in c["runs"]) and len(data["cases"][0]["runs"]) == 2
    assert (run / "raw/fastop/fastop-n10-r1.txt").read_text() == "max diff: 0.001\ntime: 20 ms\n"
    summary = (run / "summary.md").read_text()
    assert "| n10 speedup | 5x (table 1) | 5x | **reproduced** |" in summary
    assert "; 4 cases, 6 commands, 0 failed" in summary and "STOPPED EARLY" not in summary
    assert (run / "metrics.csv").is_file() and (run / "claims.png").is_file()



def test_a_run_of_an_image_another_cache_built_records_what_the_image_was_made_of(paper, tmp_path, monkeypatch):
    """The image was built (by CI, another user, another KERNELLAB_CACHE): the run reads its record from it."""
    root, commits = paper
    folder = write_recipe(root / "r" / "fastop", commits)
    build.build(read.load(str(folder)), engine=DOCKER, out=io.StringIO())
    monkeypatch.setenv("KERNELLAB_CACHE", str(tmp_path / "another-cache"))
    run, _, cases = reproduce.run(str(folder), k="fastop", quick=True, where=NO_GPU, results=tmp_path / "results",
                              engine=DOCKER, out=io.StringIO())
    data = json.loads((run / "run.json").read_text())
    assert cases and data["sources"]["fastop"]["commit"] == commits["paper"]
    assert [p["reason"] for p in data["patches"]] == ["the test's stand-in for an arch flag"]


def test_the_demo_recipe_builds_runs_and_judges_every_claim_as_a_user_runs_it(tmp_path, monkeypatch):
    """`invoke recipe run demo` as a newcomer types it, on the cpu target: its two folder sources made into their
    pinned commits, two patches, two build steps, the candidate against the baseline (checked before anything is
    judged), a verdict for every claim: the CPU ones judged, the CUDA ones not run (no CUDA here), said so."""
    import subprocess
    import sys

    from conftest import ROOT

    monkeypatch.setenv("KERNELLAB_CACHE", str(tmp_path / "cache"))
    results = tmp_path / "results"
    r = subprocess.run([sys.executable, "-m", "invoke", "recipe", "run", "demo", "--gpu-mode", "none",
                        "--out", str(results)], cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, (r.stdout + r.stderr)[-4000:]
    run = next((results / "demo").iterdir())
    data = json.loads((run / "run.json").read_text())
    recipe = read.load("demo")
    assert {k: v["commit"] for k, v in data["sources"].items()} == {s.name: s.commit for s in recipe.sources}
    assert data["sources"]["transpose"]["url"] == "recipes/demo/paper"
    assert [p["file"] for p in data["patches"]] == ["portable-compiler.diff", "target-archs.diff"]
    assert [(c["experiment"], c["params"]) for c in data["cases"]] == [
        ("blocked", {"n": 2048}), ("blocked", {"n": 4096}), ("naive", {"n": 2048}), ("naive", {"n": 4096})]
    for case in data["cases"]:
        assert not case["problem"] and case["metrics"]["time_ms"] > 0 and case["metrics"]["bandwidth"] > 0
        assert [s["value"] for s in case["sanity"]] == [0] and all(s["ok"] for s in case["sanity"])
        assert len(case["runs"]) == 3
    verdicts = {v["claim"]: v for v in data["claims"]}
    assert set(verdicts) == {c.name for c in recipe.claims}
    for name in ("CPU n2048 speedup", "CPU n4096 speedup"):
        assert verdicts[name]["verdict"] in ("reproduced", "within tolerance", "not reproduced"), verdicts[name]
        assert verdicts[name]["measured"] > 0
    for name in ("GPU n4096 speedup", "GPU n8192 speedup", "GPU n8192 time on V100"):
        assert verdicts[name]["verdict"] == "not run" and "CUDA" in verdicts[name]["why"], verdicts[name]
    summary = (run / "summary.md").read_text()
    assert "CPU n4096 speedup" in summary and (run / "claims.png").is_file() and (run / "metrics.csv").is_file()
    # The same again: the image is found by its label, nothing is built.
    again = subprocess.run([sys.executable, "-m", "invoke", "recipe", "build", "demo"], cwd=ROOT, capture_output=True,
                           text=True, timeout=300)
    assert again.returncode == 0 and "unchanged" in again.stdout, again.stdout + again.stderr


@pytest.mark.full
def test_an_exported_recipe_carries_image_recipe_and_runs_and_a_damaged_file_stops_the_import(paper, tmp_path,
                                                                                            monkeypatch):
    """Exports the small recipe's image (on kernellab:cpu, so a 2.6 GB save) with its folder and a run: the full tier
    (46 s on 2 cores; the engine contract's export round trip stays in `make test`)."""
    from kernellab.transfer import importers

    root, commits = paper
    folder = write_recipe(root / "r" / "fastop", commits)
    run, _, _ = reproduce.run(str(folder), where=NO_GPU, quick=True, results=tmp_path / "results", engine=DOCKER,
                          out=io.StringIO())
    # A run of another image (an earlier build) beside it: it is not this image's, so it is left out, said so.
    other = tmp_path / "results" / "fastop" / "20200101-000000-nogpu"
    shutil.copytree(run, other)
    data = json.loads((other / "run.json").read_text())
    data["image"]["id"] = "sha256:" + "e" * 64
    (other / "run.json").write_text(json.dumps(data))
    with pytest.raises(RecipeError, match=r"20200101-000000-nogpu was not run with the image being exported"):
        reproduce.export(str(folder), tmp_path / "refused", runs=(run, other), engine=DOCKER, out=io.StringIO())
    said = io.StringIO()
    from kernellab.recipes import record
    monkeypatch.setattr(record, "RESULTS", tmp_path / "results")
    bundle = reproduce.export(str(folder), tmp_path / "bundles", engine=DOCKER, out=said)
    assert f"runs packed: {run.name}" in said.getvalue() and "left out: 20200101-000000-nogpu (made with image" in said.getvalue()
    assert (bundle / "recipe" / "fastop" / "recipe.toml").is_file()
    assert (bundle / "recipe" / "runs" / run.name / "summary.md").is_file()
    assert not (bundle / "recipe" / "runs" / other.name).exists()
    sums = (bundle / "FILES.SHA256SUMS").read_text()
    assert "recipe/fastop/patches/speed.diff" in sums and f"recipe/runs/{run.name}/run.json" in sums
    (bundle / "recipe" / "fastop" / "recipe.toml").write_text("tampered\n")
    with pytest.raises(Exception, match=r"travel with the image .* missing or damaged: recipe/fastop/recipe.toml"):
        importers.import_bundle(bundle, engine=DOCKER)
    # ... and with the list gone too, or a file it does not name: refused, nothing loaded.
    (bundle / "FILES.SHA256SUMS").unlink()
    with pytest.raises(Exception, match=r"missing or damaged: recipe/fastop/baseline.sh \(not in FILES.SHA256SUMS\)"):
        importers.import_bundle(bundle, engine=DOCKER)


def test_ctrl_c_midway_keeps_what_ran_in_the_record(paper, tmp_path):
    root, commits = paper
    folder = write_recipe(root / "r" / "fastop", commits)
    calls = []

    class Interrupted:  # the real place (a container of the recipe's image), and Ctrl-C at the third job
        def run(self, job):
            calls.append(job)
            if len(calls) == 3:  # the second case's first repeat
                raise KeyboardInterrupt
            return Container(f"kernellab-recipe:{read.load(str(folder)).name}", False, None, DOCKER).run(job)

    with pytest.raises(reproduce.Stopped) as stop:   # a KeyboardInterrupt that knows where the record is
        reproduce.run(str(folder), where=NO_GPU, place=Interrupted(), results=tmp_path / "results", engine=DOCKER,
                  out=io.StringIO())
    run = next((tmp_path / "results" / "fastop").iterdir())
    assert stop.value.folder == run and (stop.value.ran, stop.value.planned) == (1, 4)
    data = json.loads((run / "run.json").read_text())
    assert [c["params"] for c in data["cases"]] == [{"n": 10}] and data["cases"][0]["metrics"] == {"time_ms": 20.0}
    assert [v["verdict"] for v in data["claims"]] == ["not run", "not run"]  # no baseline ran
    assert all("the run stopped before it" in v["why"] for v in data["claims"]), data["claims"]
    # ... and the record says the run stopped early, and after how many of its cases.
    planned = sum(len(e.cases(False)) for e in read.load(str(folder)).experiments)
    assert (data["stopped_early"], data["planned"]) == (True, planned) and planned > 1
    assert f"1 of {planned} cases (**STOPPED EARLY**" in (run / "summary.md").read_text()


def test_a_shell_before_a_step_has_the_state_the_step_finds_and_the_patched_sources(paper):
    """`invoke recipe shell NAME --step 2` as a user types it; its commands come on stdin (no terminal here)."""
    import subprocess
    import sys

    from conftest import ROOT

    root, commits = paper
    folder = write_recipe(root / "r" / "fastop", commits)
    script = "test -s /src/stamp && echo stamp-there; grep SPEED= /sources/build.sh; test -e /src/out || echo no-out\n"
    r = subprocess.run([sys.executable, "-m", "invoke", "recipe", "shell", str(folder), "--step", "2",
                        "--gpu-mode", "none"], cwd=ROOT, input=script, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "stamp-there" in r.stdout                 # step 1 ran: its file is in /src
    assert "SPEED=5" in r.stdout                     # the patch is applied in the mounted sources
    assert "no-out" in r.stdout                      # step 2 (build.sh makes out/) has not run
    assert "that step runs:\n  cd /src/. && bash build.sh" in r.stdout
