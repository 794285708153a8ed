"""Cluster runs against a real one-node Slurm (tests/slurm/start-slurm.sh: Debian's slurm-wlm and munge).

The node offers stand-in GPU types h100 and a100 (gres backed by /dev/null and /dev/zero), so the
CPU op runs as if on two GPU types. Through the docker runtime and through Charliecloud (real
ch-convert and ch-run), `invoke test --on slurm` and `invoke bench --on slurm --quick` give merged
reports; with runtime none, a task that fails and one that runs past its time limit are reported
while the others' results are kept, --resume reruns only those, and Ctrl-C cancels the arrays.
Apptainer and enroot/pyxis cannot be installed here: tests/test_cluster.py checks their command lines.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from conftest import ROOT, _require

pytestmark = [pytest.mark.slurm, pytest.mark.slow]
DOCKER_MARKS = [pytest.mark.docker]


def slurm_problem() -> str | None:
    if os.geteuid() != 0:
        return "the one-node Slurm of the tests runs its daemons as root; run as root (CI does)"
    missing = [t for t in ("munged", "slurmctld", "slurmd", "sbatch", "ch-convert", "ch-run") if not shutil.which(t)]
    if missing:
        return f"needs {', '.join(missing)}: `make test-tools` installs slurm-wlm, munge and charliecloud"
    return None


@pytest.fixture(scope="session")
def slurm() -> None:
    """A running one-node Slurm (started here if it is not up)."""
    _require("slurm", slurm_problem(), "KERNELLAB_REQUIRE_SLURM")
    r = subprocess.run(["bash", str(ROOT / "tests/slurm/start-slurm.sh")], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr


@pytest.fixture(scope="session")
def shared() -> Path:
    """The cluster's shared folder for this session (converted images are large: removed at the end)."""
    path = Path(tempfile.mkdtemp(prefix="kl-cluster-", dir="/var/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="module")
def cpu_image(default_image: str) -> str:
    """The image the tasks run in: conftest's default_image (kernellab:cpu)."""
    return default_image


def profile(shared: Path, runtime: str, time_limit: str = "15", name: str = "") -> Path:
    """A profile for the test cluster. Its nodes' Python is bare: the standard library alone (python3 -S,
    no site-packages), as on a cluster node, which has no docker SDK, jinja2 or torch of the user's."""
    bare = shared / "bare-python3"
    if not bare.exists():
        bare.write_text("#!/bin/sh\nexec /usr/bin/python3 -S \"$@\"\n")
        bare.chmod(0o755)
    path = shared / f"{name or runtime}.toml"
    path.write_text(f'runtime = "{runtime}"\nshared = "{shared}"\ntime = "{time_limit}"\npython = "{bare}"\n'
                    '[gpu_types]\nh100 = "--gres=gpu:h100:1"\na100 = "--gres=gpu:a100:1"\n')
    return path


def invoke(*args: str, env: dict[str, str] | None = None, timeout: float = 1200) -> subprocess.CompletedProcess:
    full = {**os.environ, "KERNELLAB_POLL_S": "1", "PYTHONUNBUFFERED": "1", **(env or {})}
    return subprocess.run([sys.executable, "-m", "invoke", *args], cwd=ROOT, env=full, capture_output=True,
                          text=True, timeout=timeout)


def run_folder(output: str) -> Path:
    """results/<run>/ as the command printed it (`results: PATH`, or the run named in its last sentence)."""
    for line in output.splitlines():
        if line.startswith("results: "):
            return Path(line.split(": ", 1)[1].strip())
        if line.startswith("run ") and ": " in line:
            return ROOT / "results" / line.split()[1].rstrip(":")
    raise AssertionError(f"no run folder in:\n{output}")


@pytest.fixture
def runs():
    """Run folders a test made under results/, removed afterwards (they are git-ignored anyway)."""
    made: list[Path] = []
    yield made
    for path in made:
        shutil.rmtree(path, ignore_errors=True)


def tasks(folder: Path) -> dict[str, dict]:
    return {f"{t['gpu']}/{t['name']}": t for t in json.loads((folder / "cluster.json").read_text())["tasks"]}


def check_test_and_bench(prof: Path, runs: list[Path]) -> dict:
    """`invoke test` and `invoke bench --quick` of the CPU op on both GPU types; the bench's cluster record."""
    t = invoke("test", "--on", "slurm", "--cluster", str(prof), "-k", "rmsnorm_cpu", "--target", "cpu")
    out = t.stdout + t.stderr
    runs.append(run_folder(out))
    assert t.returncode == 0, out[-4000:]
    folder = runs[-1]
    summary = (folder / "summary.md").read_text()
    row = next(line for line in summary.splitlines() if line.startswith("| rmsnorm_cpu"))
    assert row.count("passed") == 2 and "0 failed" in row, summary
    assert {k: v["state"] for k, v in tasks(folder).items()} == {"h100/rmsnorm_cpu": "done", "a100/rmsnorm_cpu": "done"}
    for gpu in ("h100", "a100"):
        assert (folder / gpu / "rmsnorm_cpu" / "junit.xml").is_file()

    b = invoke("bench", "--on", "slurm", "--cluster", str(prof), "-k", "rmsnorm_cpu", "--quick", "--target", "cpu")
    out = b.stdout + b.stderr
    runs.append(run_folder(out))
    assert b.returncode == 0, out[-4000:]
    folder = runs[-1]
    summary = (folder / "summary.md").read_text()
    assert "h100 median" in summary and "a100 median" in summary, summary
    assert (folder / "cross_gpu.png").stat().st_size > 1000
    from kernellab.bench import compare, results

    for gpu in ("h100", "a100"):
        doc = results.load(folder / gpu)
        assert {r["op"] for r in doc["rows"]} == {"rmsnorm_cpu"} and any(r["status"] == "ok" and r["samples_ms"] for r in doc["rows"])
    merged = results.load(folder)
    assert not compare.compare(merged, merged).regressions
    record = json.loads((folder / "cluster.json").read_text())
    return record


@pytest.mark.docker
@pytest.mark.full  # 150-265 s on 2 cores: the full tier (docs/testing.md)
def test_test_and_bench_on_slurm_through_docker(slurm, shared: Path, cpu_image: str, runs: list[Path]) -> None:
    record = check_test_and_bench(profile(shared, "docker"), runs)
    # The test run converted the image (a bundle in the shared folder); the bench run found it there.
    assert record["image"]["reused"] is True and record["image"]["convert_s"] == 0
    assert Path(record["image"]["path"]).name.endswith(".bundle")


@pytest.mark.docker
@pytest.mark.full  # 150-265 s on 2 cores: the full tier (docs/testing.md)
def test_test_and_bench_on_slurm_through_charliecloud(slurm, shared: Path, cpu_image: str, runs: list[Path]) -> None:
    record = check_test_and_bench(profile(shared, "charliecloud"), runs)
    image = Path(record["image"]["path"])
    assert record["image"]["reused"] is True and image.name.endswith(".ch") and (image / "ch" / "environment").is_file()
    log = next((runs[-1] / "logs").glob("h100-*.log")).read_text()
    assert "runtime charliecloud" in log


@pytest.mark.docker
@pytest.mark.full  # about 45 s on 2 cores (Slurm starts a task that fails): the full tier (docs/testing.md)
def test_a_node_without_the_runtime_fails_fast_saying_which(slurm, shared: Path, cpu_image: str, runs: list[Path],
                                                            tmp_path: Path) -> None:
    # The node's PATH (sbatch passes the submitter's) has Python, Docker and Slurm but no podman.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python3").symlink_to(os.path.realpath(sys.executable))  # not a pyenv shim: it needs pyenv on PATH
    for tool in ("bash", "sh", "env", "git", "docker", "sbatch", "squeue", "scontrol", "scancel", "sinfo"):
        found = shutil.which(tool)
        if found:
            (bin_dir / tool).symlink_to(found)
    prof = profile(shared, "podman", name="no-podman")
    r = invoke("submit", "--cluster", str(prof), "--gpus", "h100", "--target", "cpu", "--", "true",
               env={"PATH": str(bin_dir)})
    out = r.stdout + r.stderr
    runs.append(run_folder(out))
    assert r.returncode == 1, out
    assert "runtime podman is not available on node" in out and "`podman` is not on PATH" in out, out
    assert "Traceback" not in out


@pytest.mark.full  # about 150 s on 2 cores: the full tier (docs/testing.md)
def test_failed_and_timed_out_tasks_are_reported_others_kept_and_resume_reruns_only_them(
        slurm, shared: Path, runs: list[Path], tmp_path: Path) -> None:
    flag = tmp_path / "break"
    flag.touch()
    script = (f'if [ -e {flag} ]; then case "$KERNELLAB_GPU_TYPE/$KERNELLAB_TASK" in '
              'a100/1) echo "boom: the kernel diverged" >&2; exit 3;; h100/2) sleep 600; exit 4;; esac; fi; '
              'echo "$KERNELLAB_GPU_TYPE $KERNELLAB_TASK" > "$KERNELLAB_RESULTS/out.txt"')
    # 2 minutes: the tasks that should end in seconds do so with room even beside CI's image builds (one overran
    # a 1-minute limit there once); the one that sleeps is stopped at the limit. `exit 4` after its sleep: the test
    # Slurm tracks a task's processes by parentage (proctrack/linuxproc), and once a shell outlived the sleep that
    # Slurm stopped and wrote its out.txt after the task was reported timed out (CI, 2026-11-29).
    prof = profile(shared, "none", time_limit="2", name="short")
    r = invoke("submit", "--cluster", str(prof), "--tasks", "3", "--", script)
    out = r.stdout + r.stderr
    runs.append(run_folder(out))
    folder = runs[-1]
    assert r.returncode == 1, out
    assert "2 of 6 task(s) did not finish with results" in out, out
    assert "a100/task-1: failed" in out and "h100/task-2: timeout" in out, out
    assert "boom: the kernel diverged" in out  # the failed task's log tail
    states = {k: v["state"] for k, v in tasks(folder).items()}
    assert states == {"a100/task-0": "done", "a100/task-1": "failed", "a100/task-2": "done",
                      "h100/task-0": "done", "h100/task-1": "done", "h100/task-2": "timeout"}
    kept = sorted(str(p.relative_to(folder)) for p in folder.glob("*/*/out.txt"))
    assert kept == ["a100/task-0/out.txt", "a100/task-2/out.txt", "h100/task-0/out.txt", "h100/task-1/out.txt"]

    flag.unlink()
    again = invoke("submit", "--cluster", str(prof), "--resume", folder.name)
    out = again.stdout + again.stderr
    assert again.returncode == 0, out
    assert "2 task(s) left (a100/task-1, h100/task-2)" in out, out
    assert out.count("submitted job") == 2 and "1 task(s) on a100 (task-1)" in out and "1 task(s) on h100 (task-2)" in out
    assert set(tasks(folder)[k]["state"] for k in states) == {"done"}
    assert len(list(folder.glob("*/*/out.txt"))) == 6


def submit_until_running(*args: str) -> tuple[subprocess.Popen, list[str]]:
    """Start `invoke submit ARGS` in its own session; return it and its output up to a task's `running` line."""
    env = {**os.environ, "KERNELLAB_POLL_S": "1", "PYTHONUNBUFFERED": "1"}
    p = subprocess.Popen([sys.executable, "-m", "invoke", "submit", *args], cwd=ROOT, env=env,
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    lines: list[str] = []
    assert p.stdout is not None
    for line in p.stdout:
        lines.append(line)
        if ": running" in line:
            break
    return p, lines


@pytest.mark.full  # 11-13 s on 2 cores: in CI's Slurm lane, beside the image builds (docs/testing.md)
def test_ctrl_c_cancels_the_arrays_says_what_and_resume_runs_the_rest(slurm, shared: Path, runs: list[Path],
                                                                       tmp_path: Path) -> None:
    prof = profile(shared, "none", name="cancel")
    flag = tmp_path / "slow"
    flag.touch()
    p, lines = submit_until_running("--cluster", str(prof), "--tasks", "2", "--",
                                    f'[ -e {flag} ] && sleep 600; echo ok > "$KERNELLAB_RESULTS/out.txt"')
    jobs = [line.split()[2].rstrip(":") for line in lines if line.startswith("submitted job")]
    assert len(jobs) == 2, "".join(lines)
    os.killpg(p.pid, signal.SIGINT)
    rest, _ = p.communicate(timeout=120)
    out = "".join(lines) + rest
    runs.append(run_folder(out))
    assert p.returncode == 130, out
    assert f"cancelled job(s) {', '.join(jobs)}" in out and "--resume" in out, out
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        left = subprocess.run(["squeue", "-h", "-j", ",".join(jobs)], capture_output=True, text=True).stdout.strip()
        if not left:
            break
        time.sleep(1)
    assert not left, f"still queued after Ctrl-C:\n{left}"
    # What was cancelled is recorded, so --resume submits exactly that.
    assert {t["state"] for t in tasks(runs[-1]).values()} == {"cancelled"}
    flag.unlink()
    again = invoke("submit", "--cluster", str(prof), "--resume", runs[-1].name)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "4 task(s) left" in again.stdout and len(list(runs[-1].glob("*/*/out.txt"))) == 4


def test_bad_input_is_one_sentence(slurm, shared: Path, tmp_path: Path) -> None:
    prof = profile(shared, "none", name="bad")
    r = invoke("submit", "--cluster", str(prof), "--gpus", "v100", "--", "true")
    assert r.returncode == 2 and "GPU type `v100` is not in" in r.stderr and "Traceback" not in r.stderr, r.stderr
    # No Slurm client on PATH: said before anything is written.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("python3", "git"):
        (bin_dir / tool).symlink_to(shutil.which(tool) or "/usr/bin/false")
    r = invoke("submit", "--cluster", str(prof), "--", "true", env={"PATH": str(bin_dir)})
    assert r.returncode == 1 and "sbatch is not installed here" in r.stderr, r.stderr


def queued_jobs() -> list[str]:
    """The queue's job IDs (not its whole table: a running job's TIME column moves every second)."""
    return sorted(subprocess.run(["squeue", "-h", "-o", "%i"], capture_output=True, text=True).stdout.split())


def test_dry_run_prints_the_batch_scripts_and_submits_nothing(slurm, shared: Path) -> None:
    before = queued_jobs()
    r = invoke("test", "--on", "slurm", "--cluster", str(profile(shared, "none", name="dry")), "--dry-run",
               "-k", "rmsnorm_cpu or softmax")
    assert r.returncode == 0, r.stderr
    assert r.stdout.count("#!/bin/bash") == 2 and "#SBATCH --gres=gpu:h100:1" in r.stdout
    assert "#SBATCH --array=0-2" in r.stdout  # rmsnorm_cpu, softmax, softmax_triton
    assert "nothing was converted or submitted" in r.stdout
    assert queued_jobs() == before


def test_resume_takes_over_a_run_whose_submitting_process_died(slurm, shared: Path, runs: list[Path],
                                                               tmp_path: Path) -> None:
    prof = profile(shared, "none", name="takeover")
    flag = tmp_path / "hold"
    flag.touch()
    p, lines = submit_until_running("--cluster", str(prof), "--gpus", "h100", "--",
                                    f'while [ -e {flag} ]; do sleep 0.5; done; echo ok > "$KERNELLAB_RESULTS/out.txt"')
    os.killpg(p.pid, signal.SIGKILL)  # the SSH session dropped: nothing gathers, the job runs on
    p.wait()
    folder = run_folder("".join(lines))
    runs.append(folder)
    assert {t["state"] for t in tasks(folder).values()} == {"submitted"}
    env = {**os.environ, "KERNELLAB_POLL_S": "1", "PYTHONUNBUFFERED": "1"}
    resumed = subprocess.Popen([sys.executable, "-m", "invoke", "submit", "--cluster", str(prof), "--resume",
                                folder.name], cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               text=True)
    time.sleep(3)
    flag.unlink()
    out, _ = resumed.communicate(timeout=120)
    assert resumed.returncode == 0, out
    assert "following 1 task(s) still in Slurm (h100/task-0)" in out and "submitted job" not in out, out
    assert (folder / "h100" / "task-0" / "out.txt").read_text() == "ok\n"


def test_a_shared_folder_the_nodes_do_not_see_is_named(slurm, shared: Path, runs: list[Path]) -> None:
    # Held at submission, the run's folder then hidden: the node finds no folder, as on a cluster whose
    # `shared` is local to the submitting machine.
    prof = profile(shared, "none", name="unshared")
    prof.write_text(prof.read_text().replace("[gpu_types]", 'sbatch = ["--hold"]\n[gpu_types]'))
    env = {**os.environ, "KERNELLAB_POLL_S": "1", "PYTHONUNBUFFERED": "1"}
    p = subprocess.Popen([sys.executable, "-m", "invoke", "submit", "--cluster", str(prof), "--gpus", "h100", "--",
                          "true"], cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert p.stdout is not None
    lines: list[str] = []
    job = ""
    try:
        for line in p.stdout:
            lines.append(line)
            if line.startswith("submitted job"):
                job = line.split()[2].rstrip(":")
                break
        assert job, "".join(lines)
        rundir = next(d for d in (shared / "runs").iterdir() if (d / "plan.json").is_file()
                      and job in json.loads((d / "plan.json").read_text())["jobs"]["h100"])
        rundir.rename(rundir.with_name(rundir.name + ".hidden"))
        subprocess.run(["scontrol", "release", job], check=True, capture_output=True)
        rest, _ = p.communicate(timeout=120)
    finally:  # never leave a held job or a follower behind for the tests after this one
        if p.poll() is None:
            p.kill()
            p.wait()
        if job:
            subprocess.run(["scancel", job], capture_output=True)
    out = "".join(lines) + rest
    runs.append(run_folder(out))
    assert p.returncode == 1, out
    assert "h100/task-0: failed" in out and "without writing its log or status file" in out, out
    assert f"is `shared` ({shared}) really shared with the nodes" in out and "Traceback" not in out, out


@pytest.mark.docker
@pytest.mark.full  # 18-22 s on 2 cores: in CI's Slurm lane, beside the image builds (docs/testing.md)
def test_a_recipe_runs_on_slurm_one_task_per_experiment_and_gpu_type_judged_per_type(
        slurm, shared: Path, default_image: str, runs: list[Path], tmp_path: Path, monkeypatch) -> None:
    """The small recipe of tests/recipe_fixtures.py, built here on kernellab:cpu (two one-line steps), run through
    the docker runtime on both stand-in GPU types; the nodes' engine has the image (load_images = false)."""
    from recipe_fixtures import make_mirror, mirror_env, write_recipe

    commits = make_mirror(tmp_path)
    mirror_env(tmp_path, monkeypatch)
    monkeypatch.setenv("KERNELLAB_CACHE", str(tmp_path / "cache"))
    folder = write_recipe(tmp_path / "fastop", commits)
    prof = profile(shared, "docker", name="recipes")
    prof.write_text(prof.read_text().replace('runtime = "docker"', 'runtime = "docker"\nload_images = false'))
    r = invoke("recipe", "run", str(folder), "--on", "slurm", "--cluster", str(prof), "--quick")
    out = r.stdout + r.stderr
    runs.append(run_folder(out))
    assert r.returncode == 0, out[-4000:]
    local = runs[-1]
    assert {k: v["state"] for k, v in tasks(local).items()} == {
        "h100/fastop": "done", "h100/baseline": "done", "a100/fastop": "done", "a100/baseline": "done"}
    summary = (local / "summary.md").read_text()
    assert "| n10 speedup | 5x (A100) | 5x (reproduced) | 5x (reproduced) |" in summary, summary
    assert "| n20 speedup | 20x (A100) | - (not run) | - (not run) |" in summary  # --quick: n=10 only
    for gpu in ("h100", "a100"):
        data = json.loads((local / gpu / "run.json").read_text())
        assert data["cases"][0]["metrics"] == {"time_ms": 20.0} and data["image"]["recipe_sha256"]
        assert (local / gpu / "fastop" / "raw" / "fastop" / "fastop-n10-r1.txt").is_file()
