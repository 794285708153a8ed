"""`invoke recipe profile NAME --on slurm`: the dry run's plan (the demo's image, kernellab.recipes.capture on its
first case, one task per GPU type) and, on the one-node Slurm of tests/slurm through the docker runtime, the demo's
CPU case captured on both stand-in GPU types, each task's folder made a profile here and one table across types.

The demo's image is a CPU one, without Nsight Systems: the test puts this machine's nsys in the cluster's shared
cache (the tasks' /cache) and names it with KERNELLAB_NSYS, which every task inherits (docs/cluster.md)."""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

import test_cluster_slurm as cluster
from kernellab.nsight import tools
from test_cluster_slurm import invoke, profile, run_folder, tasks
from test_recipe_profile import real_nsys

slurm, shared, runs = cluster.slurm, cluster.shared, cluster.runs   # the one-node Slurm's fixtures


@pytest.mark.docker
@pytest.mark.slow
def test_the_dry_run_plans_the_capture_of_the_case_in_the_recipes_image_per_gpu_type(tmp_path: Path) -> None:
    prof = tmp_path / "cluster.toml"
    prof.write_text(f'runtime = "docker"\nshared = "{tmp_path / "shared"}"\n[gpu_types]\nh100 = "--gres=gpu:h100:1"\n'
                    'a100 = "--gres=gpu:a100:1"\n')
    r = invoke("recipe", "profile", "demo", "--on", "slurm", "--dry-run", "--cluster", str(prof), "--case", "n=4096")
    assert r.returncode == 0, r.stdout + r.stderr
    head = r.stdout[r.stdout.index("# each task runs"):].splitlines()
    assert head[0].startswith("# each task runs, in kernellab-recipe:cpu-"), head[0]
    assert head[1] == ("# KERNELLAB_OUT=\"$KERNELLAB_RESULTS\" exec python -m kernellab.recipes.capture --cwd . "
                       "--command './build/transpose blocked 4096 32' --stem \"$KERNELLAB_GPU_TYPE\"-blocked-n4096 "
                       "--seconds 600 --about '<profile.json's start: the recipe's provenance>'"), head[1]
    assert r.stdout.count("#!/bin/bash") == 2 and "#SBATCH --gres=gpu:a100:1" in r.stdout
    assert "nothing was converted or submitted" in r.stdout and not (tmp_path / "shared" / "runs").exists()


@pytest.mark.slurm
@pytest.mark.docker
@pytest.mark.slow
@pytest.mark.full  # about 75 s: the demo's image converted for the nodes (60 s) and two captures
def test_the_demos_cpu_case_is_profiled_on_each_gpu_type_and_merged(slurm, shared: Path, runs: list[Path]) -> None:
    exe = real_nsys()
    nsys_copy = shared / "cache" / "nsys"
    if not nsys_copy.exists():
        nsys_copy.parent.mkdir(parents=True, exist_ok=True)
        try:
            shutil.copytree(tools.install_folder(exe), nsys_copy, symlinks=True, copy_function=os.link)
        except OSError:  # another file system: a real copy
            shutil.rmtree(nsys_copy, ignore_errors=True)
            shutil.copytree(tools.install_folder(exe), nsys_copy, symlinks=True)
    inside = f"/cache/nsys/{exe.resolve().relative_to(tools.install_folder(exe)).as_posix()}"
    r = invoke("recipe", "profile", "demo", "--on", "slurm", "--cluster", str(profile(shared, "docker", "120")),
               "--seconds", "60", env={"KERNELLAB_NSYS": inside, "KERNELLAB_GPU_MODE": "none"})
    out = r.stdout + r.stderr
    folder = run_folder(out)
    runs.append(folder)
    assert r.returncode == 0, out[-4000:]
    assert {k: v["state"] for k, v in tasks(folder).items()} == {"h100/task-0": "done", "a100/task-0": "done"}
    summary = (folder / "summary.md").read_text()
    assert "## Top kernels by GPU time, per GPU type: demo, blocked n=2048" in summary, summary
    for gpu in ("h100", "a100"):
        assert f"| {gpu} | none: CUDA was not traced (a CPU case); the case took" in summary, summary
        task = folder / gpu / "task-0"
        assert (task / f"{gpu}-blocked-n2048.nsys-rep").is_file() and (task / "timeline.png").is_file()
        assert not (task / f"{gpu}-blocked-n2048.sqlite").exists()
        assert "mismatches: 0" in (task / "summary.md").read_text()
        doc = json.loads((task / "profile.json").read_text())
        assert doc["machine"]["gpu_type"] == gpu and doc["machine"]["host"] and doc["nsys"]["path"] == inside
        assert doc["image"]["tag"].startswith("kernellab-recipe:cpu-") and set(doc["sources"]) == {"transpose",
                                                                                                  "minibench"}
        assert doc["command"] == "./build/transpose blocked 2048 32" and doc["seconds_limit"] == 60
