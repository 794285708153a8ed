"""kernellab.cluster without a cluster: the profile, the plan and the repository snapshot, the sbatch
script, squeue/scontrol parsing, every runtime's command line (Apptainer and enroot/pyxis cannot be
installed for tests/test_cluster_slurm.py, so their command lines are checked here), image products and
arch checks, the Kubernetes manifest, task outcomes and the merged summary, and the node's own side.
CPU only: no Slurm, no engine, no GPU."""
from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from kernellab import gpu, jobs
from kernellab.cluster import follow, images, kube, node, plan, profile, runs, runtimes, slurm
from kernellab.cluster.images import Prepared
from kernellab.cluster.plan import Plan, Task
from kernellab.cluster.profile import Profile
from kernellab.errors import ClusterError, UsageError
from kernellab.ops import spec

FULL = """\
scheduler = "slurm"
runtime = "apptainer"
shared = "/scratch/lab/kernellab"
partition = "gpu"
account = "lab42"
qos = "high"
time = "2-00:00:00"
throttle = 4
modules = ["cuda/12.4", "apptainer/1.3"]
sbatch = ["--mem=32G", "--cpus-per-task=8"]
gpu_mode = "cdi"
python = "/usr/bin/python3.11"
charliecloud_format = "squash"
load_images = false

[gpu_types]
h100 = "--gres=gpu:h100:1 --constraint='hopper&fast'"
a100 = ["--gres=gpu:a100:1", "--exclude=node3"]

[kubernetes]
namespace = "lab"
image = "registry.example/kernellab:cu130"
"""

MINIMAL = """\
shared = "/scratch/x"

[gpu_types]
h100 = "--gres=gpu:h100:1"
"""

RUN = "20250102-030405-slurm-submit"


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def make_profile(tmp_path: Path, **kw: Any) -> Profile:
    args: dict[str, Any] = {"path": tmp_path / "cluster.toml", "shared": tmp_path / "shared",
                            "gpu_types": {"h100": ["--gres=gpu:h100:1"], "a100": ["--gres=gpu:a100:1"]}}
    args.update(kw)
    return Profile(**args)


def make_plan(tmp_path: Path, kind: str = "submit", gpus: tuple[str, ...] = ("h100", "a100"), n: int = 2,
              runtime: str = "none", run: str = RUN, **kw: Any) -> Plan:
    """A plan of job `kind` (submit: N copies of a command; test, bench: the first N ops) on the GPU types."""
    names = [s.name for s in spec.discover()]
    ops = " or ".join(f"({jobs.exact_select(op, names)})" for op in ["softmax", "vector_add", "layernorm"][:n])
    job = {"submit": jobs.submit("echo $KERNELLAB_TASK", copies=n), "test": jobs.test(ops),
           "bench": jobs.bench(ops)}[kind]
    parts = [part for part in job.parts()] if job.parts else []
    tasks = []
    for g in gpus:
        for i, part in enumerate(parts):
            argv, env = plan.task_argv(part.argv, run, g, part.name)
            tasks.append(Task(g, i, part.name, argv, {**env, **part.env, "KERNELLAB_TASK": str(i)}))
    return Plan(run=run, job=kind, rundir=str(tmp_path / "shared" / "runs" / run), runtime=runtime, gpu_mode="",
                image={"ref": "kernellab:cpu", "id": "sha256:" + "ab" * 32, "path": "/shared/images/x"},
                tasks=tasks, merger=job.merger, **kw)


# ---------------------------------------------------------------- profile


def test_a_full_profile_round_trips_into_its_fields(tmp_path: Path) -> None:
    path = write(tmp_path / "cluster.toml", FULL)
    assert set(profile.tomllib.loads(FULL)) == profile._KEYS  # every key the profile knows is exercised
    p = profile.load(path)
    assert p.path == path
    assert p.shared == Path("/scratch/lab/kernellab")
    assert p.scheduler == "slurm" and p.runtime == "apptainer"
    assert (p.partition, p.account, p.qos, p.time, p.throttle) == ("gpu", "lab42", "high", "2-00:00:00", 4)
    assert p.modules == ["cuda/12.4", "apptainer/1.3"]
    assert p.sbatch == ["--mem=32G", "--cpus-per-task=8"]
    assert p.gpu_mode == "cdi" and p.python == "/usr/bin/python3.11" and p.charliecloud_format == "squash"
    assert p.load_images is False
    # a string is split like a shell would (quotes kept together); a list is taken as it is
    assert p.gpu_types == {"h100": ["--gres=gpu:h100:1", "--constraint=hopper&fast"],
                           "a100": ["--gres=gpu:a100:1", "--exclude=node3"]}
    assert p.gpu_options("a100") == ["--gres=gpu:a100:1", "--exclude=node3"]
    assert p.kubernetes == {"namespace": "lab", "image": "registry.example/kernellab:cu130"}


def test_a_minimal_profile_takes_the_defaults(tmp_path: Path) -> None:
    p = profile.load(write(tmp_path / "cluster.toml", MINIMAL))
    assert (p.scheduler, p.runtime, p.partition, p.account, p.qos) == ("slurm", "docker", "", "", "")
    assert (p.time, p.throttle, p.modules, p.sbatch, p.gpu_mode) == ("01:00:00", 0, [], [], "")
    assert (p.python, p.charliecloud_format, p.kubernetes) == ("python3", "dir", {})


@pytest.mark.parametrize("line, key", [
    ('partiton = "gpu"', "partiton"),
    ('scheduler = "pbs"', "scheduler"),
    ('runtime = "singularity"', "runtime"),
    ('time = "abc"', "time"),
    ("time = 60", "time"),
    ("throttle = -1", "throttle"),
    ("throttle = true", "throttle"),
    ('throttle = "2"', "throttle"),
    ('gpu_mode = "gpus"', "gpu_mode"),
    ('charliecloud_format = "tar"', "charliecloud_format"),
    ('modules = "cuda"', "modules"),
    ("kubernetes = 3", "kubernetes"),
    ('sbatch = ["--mem=8G", "--output=/home/me/%j.log"]', "--output=/home/me/%j.log"),
    ('sbatch = ["-o /tmp/x.log"]', "leave those options out"),
    ('sbatch = ["--chdir=/home/me"]', "--chdir"),
])
def test_a_bad_value_is_one_sentence_naming_the_file_and_the_key(tmp_path: Path, line: str, key: str) -> None:
    path = write(tmp_path / "lab" / "cluster.toml", line + "\n" + MINIMAL)
    with pytest.raises(ClusterError) as e:
        profile.load(path)
    assert str(path) in str(e.value) and key in str(e.value)


@pytest.mark.parametrize("text, key", [
    ('[gpu_types]\nh100 = "--gres=gpu:h100:1"\n', "shared"),
    ('shared = "/s"\n', "gpu_types"),
    ('shared = "/s"\n[gpu_types]\n', "gpu_types"),
    ('shared = "/s"\n[gpu_types]\nH100 = "--gres=gpu:h100:1"\n', "H100"),
    ('shared = "/s"\n[gpu_types]\n"h 100" = "--gres=gpu:h100:1"\n', "h 100"),
    ('shared = "/s"\n[gpu_types]\nh100 = 1\n', "gpu_types.h100"),
    ('shared = "/s"\n[gpu_types\n', "cluster.toml"),
])
def test_a_missing_or_malformed_part_names_the_file_and_the_key(tmp_path: Path, text: str, key: str) -> None:
    path = write(tmp_path / "cluster.toml", text)
    with pytest.raises(ClusterError) as e:
        profile.load(path)
    assert str(path) in str(e.value) and key in str(e.value)


def test_a_missing_profile_file_is_one_sentence(tmp_path: Path) -> None:
    with pytest.raises(ClusterError, match="cannot read the cluster profile .*nope.toml"):
        profile.load(tmp_path / "nope.toml")


def test_a_relative_shared_folder_is_relative_to_the_profile(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = write(tmp_path / "site" / "cluster.toml", MINIMAL.replace('"/scratch/x"', '"../shared/kl"'))
    monkeypatch.chdir(write(tmp_path / "elsewhere" / "x", "").parent)
    p = profile.load(path)
    assert p.shared == (tmp_path / "shared" / "kl").resolve()
    assert p.shared.is_absolute()


def test_find_takes_explicit_then_configured_then_the_variable_then_the_root(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(profile, "ROOT", tmp_path)
    explicit, configured, env = (write(tmp_path / f"{n}.toml", MINIMAL) for n in ("explicit", "configured", "env"))
    root = write(tmp_path / "cluster.toml", MINIMAL)
    monkeypatch.setenv("KERNELLAB_CLUSTER", str(env))
    assert profile.find(explicit, str(configured)) == explicit
    assert profile.find(None, str(configured)) == configured
    assert profile.find() == env
    monkeypatch.delenv("KERNELLAB_CLUSTER")
    assert profile.find() == root
    # a path that was named but does not exist is an error, never a fall back to the next place
    with pytest.raises(ClusterError, match=r"cluster profile .*missing\.toml does not exist"):
        profile.find(tmp_path / "missing.toml")


def test_find_without_any_profile_says_how_to_give_one(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(profile, "ROOT", tmp_path)
    monkeypatch.delenv("KERNELLAB_CLUSTER", raising=False)
    with pytest.raises(ClusterError) as e:
        profile.find()
    message = str(e.value)
    assert message.startswith("no cluster profile")
    assert "cluster.toml" in message and "--cluster" in message and "KERNELLAB_CLUSTER" in message


def test_choose_gpus(tmp_path: Path) -> None:
    p = make_profile(tmp_path)
    assert p.choose_gpus(None) == ["a100", "h100"]  # every type, sorted
    assert p.choose_gpus("") == ["a100", "h100"]
    assert p.choose_gpus("H100, a100") == ["h100", "a100"]  # the order asked, lower-cased
    assert p.choose_gpus("h100,h100") == ["h100"]
    with pytest.raises(ClusterError) as e:
        p.choose_gpus("h100,v100")
    assert "`v100`" in str(e.value) and "a100, h100" in str(e.value) and str(p.path) in str(e.value)
    with pytest.raises(ClusterError, match="--gpus is empty"):
        p.choose_gpus(" , ")


# ---------------------------------------------------------------- plan


def test_exact_select_selects_exactly_one_op_through_the_k_matcher() -> None:
    names = ["softmax", "softmax_triton", "vector_add"]
    expr = jobs.exact_select("softmax", names)
    assert expr == "softmax and not softmax_triton"
    matcher = spec.compile_select(expr)
    assert [n for n in names if matcher(n)] == ["softmax"]
    assert jobs.exact_select("vector_add", names) == "vector_add"
    for name in names:
        match = spec.compile_select(jobs.exact_select(name, names))
        assert [n for n in names if match(n)] == [name]


def test_exact_select_picks_each_real_op_alone() -> None:
    names = [s.name for s in spec.discover()]
    assert "softmax" in names and "softmax_triton" in names
    for name in names:
        assert [s.name for s in spec.discover(select=jobs.exact_select(name, names))] == [name]


def test_each_job_says_its_parts_and_a_task_runs_its_part_with_the_run_s_variables() -> None:
    out = "results/r1/h100/softmax"
    test_parts = {p.name: p for p in jobs.test("softmax").parts()}
    assert list(test_parts) == ["softmax", "softmax_triton"], "-k softmax: every op it matches, one part each"
    argv, env = plan.task_argv(test_parts["softmax"].argv, "r1", "h100", "softmax")
    assert argv[:4] == ["python", "-m", "pytest", "tests/test_kernels.py"]
    assert argv[argv.index("--junitxml") + 1] == f"{out}/junit.xml"
    assert env == {"KERNELLAB_RUN": "r1", "KERNELLAB_GPU_TYPE": "h100", "KERNELLAB_RESULTS": out}
    assert test_parts["softmax"].env == {"KERNELLAB_OPS": "softmax and not softmax_triton"}

    (bench,) = jobs.bench("softmax and not triton").parts()
    argv, env = plan.task_argv(bench.argv, "r1", "h100", "softmax")
    assert argv == ["python", "-m", "kernellab.bench", "-k", "softmax and not softmax_triton", "--out", out]
    assert env["KERNELLAB_RESULTS"] == out and not bench.env
    (quick,) = jobs.bench("softmax and not triton", quick=True).parts()
    argv, _ = plan.task_argv(quick.argv, "r1", "h100", "softmax")
    assert "--quick" in argv and argv[argv.index("--out") + 1] == out

    copies = jobs.submit("python x.py", copies=4).parts()
    assert [p.name for p in copies] == ["task-0", "task-1", "task-2", "task-3"]
    argv, env = plan.task_argv(copies[3].argv, "r1", "a100", "task-3")
    assert argv == ["bash", "-c", "python x.py"]
    assert env == {"KERNELLAB_RUN": "r1", "KERNELLAB_GPU_TYPE": "a100", "KERNELLAB_RESULTS": "results/r1/a100/task-3"}
    assert jobs.test().merger and jobs.bench().merger and jobs.submit("x").merger is None


def test_a_job_that_selects_no_op_and_a_submit_of_no_copies_are_refused() -> None:
    with pytest.raises(UsageError, match="no op matches -k 'nosuchop'"):
        jobs.test("nosuchop").parts()
    with pytest.raises(UsageError, match="--tasks 0: give 1 or more"):
        jobs.submit("true", copies=0)


def test_a_plan_written_before_jobs_named_their_merger_loads_with_its_kinds_merger(tmp_path: Path) -> None:
    saved = make_plan(tmp_path, kind="bench").save()
    data = json.loads(saved.read_text())
    data["kind"] = data.pop("job")
    del data["merger"]
    saved.write_text(json.dumps(data))
    old = Plan.load(saved)
    assert old.job == "bench" and old.merger == "kernellab.cluster.report:bench_tables"


def test_plan_saves_and_loads_back(tmp_path: Path) -> None:
    p = make_plan(tmp_path, jobs={"h100": ["12", "15"]}, select="soft", argv=["invoke", "submit"], python="python3.12")
    saved = p.save()
    assert saved == Path(p.rundir) / "plan.json"
    assert [f.name for f in saved.parent.iterdir()] == ["plan.json"]  # no temporary file left behind
    back = Plan.load(saved)
    assert back == p
    assert all(isinstance(t, Task) for t in back.tasks)
    assert back.task("a100", 1).key == "a100/task-1"
    assert back.gpus == ["h100", "a100"] and [t.index for t in back.tasks_of("a100")] == [0, 1]
    assert back.status_file(back.task("a100", 1)) == Path(p.rundir) / "status" / "a100" / "1.json"
    assert back.results_of(back.task("h100", 0)) == f"results/{RUN}/h100/task-0"
    with pytest.raises(ClusterError, match="has no task 7 for GPU type h100"):
        back.task("h100", 7)


@pytest.mark.parametrize("text", ["not json", "[]", "null", '{"run": "x"}', '{"tasks": [{"gpu": "h100"}]}',
                                  '{"tasks": [], "nonsense": 1}'])
def test_plan_load_of_anything_else_is_one_sentence(tmp_path: Path, text: str) -> None:
    path = write(tmp_path / "plan.json", text)
    with pytest.raises(ClusterError, match="is not a kernellab cluster plan"):
        Plan.load(path)
    with pytest.raises(ClusterError, match="is not a kernellab cluster plan"):
        Plan.load(tmp_path / "absent.json")


def _git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True)


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_snapshot_copies_tracked_and_untracked_files_but_not_ignored_ones_nor_results(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    write(repo / "src" / "pkg" / "tracked.py", "x = 1\n")
    write(repo / ".gitignore", "ignored.txt\n*.log\n")
    write(repo / "results" / "old-run" / "tracked.json", "{}")   # tracked, still never copied
    _git(repo, "init", "-q")
    _git(repo, "add", "src/pkg/tracked.py", ".gitignore", "results/old-run/tracked.json")
    write(repo / "notes" / "untracked.md", "new\n")
    write(repo / "ignored.txt", "secret\n")
    write(repo / "build.log", "log\n")
    write(repo / "results" / "run2" / "summary.md", "untracked result\n")
    dest = tmp_path / "workspace"
    count = plan.snapshot(dest, repo)
    arrived = sorted(str(p.relative_to(dest)) for p in dest.rglob("*") if p.is_file())
    assert arrived == [".gitignore", "notes/untracked.md", "src/pkg/tracked.py"]
    assert count == 3
    assert (dest / "src" / "pkg" / "tracked.py").read_text() == "x = 1\n"
    assert (dest / "results").is_dir() and not any((dest / "results").iterdir())
    assert not (dest / ".git").exists()


def test_snapshot_without_git_walks_the_tree_skipping_results_and_caches(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    write(repo / "src" / "a.py", "a")
    write(repo / "src" / "__pycache__" / "a.pyc", "c")
    write(repo / "results" / "r" / "x.json", "{}")
    write(repo / ".venv" / "bin" / "python", "")
    dest = tmp_path / "workspace"
    assert plan.snapshot(dest, repo) == 1
    assert sorted(str(p.relative_to(dest)) for p in dest.rglob("*") if p.is_file()) == ["src/a.py"]


def test_passed_env_keeps_kernellab_switches_but_not_this_machines_paths(monkeypatch: pytest.MonkeyPatch) -> None:
    for k in list(os.environ):
        if k.startswith("KERNELLAB_"):
            monkeypatch.delenv(k)
    monkeypatch.setenv("KERNELLAB_REQUIRE_GPU", "1")
    monkeypatch.setenv("KERNELLAB_CACHE", "/home/me/.cache/kernellab")
    monkeypatch.setenv("KERNELLAB_CLUSTER", "/home/me/cluster.toml")
    monkeypatch.setenv("KERNELLAB_ENGINE", "podman")
    monkeypatch.setenv("OTHER", "x")
    assert plan.passed_env() == {"KERNELLAB_REQUIRE_GPU": "1"}


# ---------------------------------------------------------------- slurm


def test_array_spec() -> None:
    assert slurm.array_spec([0, 1, 2, 3]) == "0-3"
    assert slurm.array_spec([3, 1, 2, 0, 2]) == "0-3"
    assert slurm.array_spec([1, 3]) == "1,3"
    assert slurm.array_spec([5]) == "5"
    assert slurm.array_spec([0, 1, 2, 3], throttle=2) == "0-3%2"
    assert slurm.array_spec([1, 3], throttle=1) == "1,3%1"
    with pytest.raises(ValueError):
        slurm.array_spec([])


def _sbatch_options(text: str) -> list[str]:
    return [line[len("#SBATCH "):] for line in text.splitlines() if line.startswith("#SBATCH ")]


def test_the_batch_script_has_every_option_and_starts_the_node_runner(tmp_path: Path) -> None:
    prof = make_profile(tmp_path, partition="gpu", account="lab42", qos="high", time="00:30:00", throttle=2,
                        modules=["cuda/12.4", "apptainer"], sbatch=["--mem=16G", "--exclusive"],
                        gpu_types={"h100": ["--gres=gpu:h100:1", "--constraint=hopper"]})
    p = make_plan(tmp_path, gpus=("h100",), n=4)
    text = slurm.script(prof, p, "h100", [0, 1, 2, 3])
    rundir = Path(p.rundir)
    assert text.startswith("#!/bin/bash\n")
    assert _sbatch_options(text) == [
        f"--job-name=kl-submit-h100-{RUN}", "--array=0-3%2", f"--output={rundir}/logs/h100-%a-%A.log",
        "--time=00:30:00", "--ntasks=1", f"--chdir={rundir}", "--partition=gpu", "--account=lab42", "--qos=high",
        "--gres=gpu:h100:1", "--constraint=hopper", "--mem=16G", "--exclusive"]
    lines = text.splitlines()
    assert "module load cuda/12.4 apptainer" in lines
    assert f"export PYTHONPATH={rundir}/workspace/src" in lines
    assert lines[-1] == (f"exec python3 -m kernellab.cluster.node {rundir}/plan.json h100 "
                         '"$SLURM_ARRAY_TASK_ID"')
    # every #SBATCH line comes before the first command, or sbatch ignores it
    first_command = next(i for i, line in enumerate(lines) if line and not line.startswith("#"))
    assert max(i for i, line in enumerate(lines) if line.startswith("#SBATCH")) < first_command
    script = write(tmp_path / "h100.sbatch", text)
    r = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def test_the_batch_script_leaves_out_what_the_profile_does_not_set(tmp_path: Path) -> None:
    prof = make_profile(tmp_path)
    text = slurm.script(prof, make_plan(tmp_path), "a100", [1, 3])
    opts = _sbatch_options(text)
    assert "--array=1,3" in opts and "--gres=gpu:a100:1" in opts
    assert not [o for o in opts if o.startswith(("--partition", "--account", "--qos"))]
    assert "module load" not in text
    with pytest.raises(ClusterError, match="GPU type `v100` is not in"):
        slurm.script(prof, make_plan(tmp_path), "v100", [0])


def test_the_batch_script_runs_the_node_runner_with_the_plan_and_the_task_index(tmp_path: Path) -> None:
    """The script itself, run by bash (as slurmd would), with a stand-in for the nodes' Python."""
    record = tmp_path / "called.txt"
    fake = write(tmp_path / "bin dir" / "python3", f'#!/bin/bash\nprintf "%s\\n" "$PYTHONPATH" "$@" > {record}\n')
    fake.chmod(0o755)
    p = make_plan(tmp_path, run="r 1")  # spaces in paths survive the quoting
    text = slurm.script(make_profile(tmp_path, python=str(fake)), p, "h100", [0, 1])
    script = write(tmp_path / "h100.sbatch", text)
    env = {"PATH": os.environ["PATH"], "SLURM_ARRAY_TASK_ID": "1"}
    r = subprocess.run(["bash", str(script)], env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert record.read_text().splitlines() == [
        str(Path(p.rundir) / "workspace" / "src"), "-m", "kernellab.cluster.node",
        str(Path(p.rundir) / "plan.json"), "h100", "1"]


def test_parse_squeue() -> None:
    assert slurm.parse_squeue("12_3|RUNNING|node7") == (("12", 3), slurm.TaskState("RUNNING", "node7"))
    assert slurm.parse_squeue("12_4|PENDING|(Resources)\n") == (("12", 4), slurm.TaskState("PENDING", "Resources"))
    assert slurm.parse_squeue("13|RUNNING|node7") is None        # not an array task
    assert slurm.parse_squeue("12_[5-9]|PENDING|(Priority)") is None
    assert slurm.parse_squeue("") is None
    assert slurm.parse_squeue("12_3|RUNNING") is None


def test_parse_scontrol() -> None:
    record = ("JobId=14 ArrayJobId=12 ArrayTaskId=1 ArrayTaskThrottle=2 JobName=kl-test-h100-r UserId=me(1000) "
              "GroupId=me(1000) Priority=4294901758 Nice=0 Account=(null) QOS=normal JobState=TIMEOUT "
              "Reason=TimeLimit Dependency=(null) Requeue=1 Restarts=0 BatchFlag=1 Reboot=0 ExitCode=0:15 "
              "RunTime=00:01:02 TimeLimit=00:01:00 NodeList=node7 StdOut=/shared/runs/r/logs/h100-1-12.log")
    key, state = slurm.parse_scontrol(record)  # type: ignore[misc]
    assert key == ("12", 1)
    assert state == slurm.TaskState("TIMEOUT", "TimeLimit", "0:15")
    assert state.final
    assert slurm.parse_scontrol("JobId=20 JobName=y JobState=COMPLETED Reason=None ExitCode=0:0") is None
    assert slurm.parse_scontrol("JobId=12 ArrayJobId=12 ArrayTaskId=2-5%2 JobState=PENDING Reason=JobArrayTaskLimit") \
        is None  # the tasks that have not started yet: squeue -r reports them one by one
    assert slurm.parse_scontrol("No jobs in the system") is None


def test_task_state_final() -> None:
    for s in ("COMPLETED", "FAILED", "TIMEOUT", "CANCELLED", "PREEMPTED", "NODE_FAIL", "OUT_OF_MEMORY"):
        assert slurm.TaskState(s).final, s
    for s in ("PENDING", "RUNNING", "COMPLETING", "CONFIGURING", "SUSPENDED", "REQUEUED", "UNKNOWN"):
        assert not slurm.TaskState(s).final, s


# ---------------------------------------------------------------- runtimes


def test_charliecloud_command_line_with_a_driver_folder(tmp_path: Path) -> None:
    ws, cache = tmp_path / "ws", tmp_path / "cache"
    argv = runtimes.charliecloud("/shared/images/abc.ch", ["python", "-m", "pytest", "-q"],
                                 {"KERNELLAB_RESULTS": "results/r/h100/softmax", "PYTHONPATH": "/workspace/src"},
                                 ws, cache, Path("/opt/driver"))
    assert argv[:3] == ["ch-run", "--unset-env=*", "--set-env"]  # the host's environment out, the image's in
    sep = argv.index("--")
    assert argv[sep - 1] == "/shared/images/abc.ch" and argv[sep + 1:] == ["python", "-m", "pytest", "-q"]
    head = argv[:sep]
    sets = [a for a in head if a.startswith("--set-env=")]
    assert sets == ["--set-env=KERNELLAB_RESULTS=results/r/h100/softmax", "--set-env=PYTHONPATH=/workspace/src",
                    "--set-env=KERNELLAB_DRIVER_LIBS=/usr/local/nvidia/lib64",
                    "--set-env=LD_LIBRARY_PATH=$LD_LIBRARY_PATH:/usr/local/nvidia/lib64"]
    # ours come after the image's own (the bare --set-env), so they win
    assert head.index("--set-env") < head.index(sets[0])
    binds = [head[i + 1] for i, a in enumerate(head) if a == "-b"]
    assert binds == [f"{ws}:/workspace", f"{cache}:/cache", "/opt/driver:/usr/local/nvidia"]
    assert head[head.index("--cd") + 1] == "/workspace"


def test_charliecloud_command_line_without_a_gpu(tmp_path: Path) -> None:
    argv = runtimes.charliecloud("/img", ["true"], {"A": "1"}, tmp_path / "ws", tmp_path / "c", None)
    joined = " ".join(argv)
    assert "/usr/local/nvidia" not in joined and "LD_LIBRARY_PATH" not in joined
    assert [argv[i + 1] for i, a in enumerate(argv) if a == "-b"] == [f"{tmp_path}/ws:/workspace", f"{tmp_path}/c:/cache"]
    assert "--set-env=A=1" in argv and argv[-2:] == ["--", "true"]


def test_apptainer_command_line(tmp_path: Path) -> None:
    ws, cache = tmp_path / "ws", tmp_path / "cache"
    env = {"CUDA_VISIBLE_DEVICES": "0,1", "KERNELLAB_OPS": "softmax and not softmax_triton", "HOME": "/cache/home"}
    argv = runtimes.apptainer("/shared/images/abc.sif", ["python", "-m", "kernellab.bench"], env, ws, cache, True)
    assert argv[:3] == ["apptainer", "exec", "--nv"]
    # Apptainer refuses HOME through --env: --home mounts the cache's home folder there instead.
    assert "--cleanenv" in argv and argv[argv.index("--home") + 1] == f"{cache}/home:/cache/home"
    assert argv[argv.index("--bind") + 1] == f"{ws}:/workspace,{cache}:/cache"
    assert argv[argv.index("--pwd") + 1] == "/workspace"
    assert [a for a in argv if a.startswith("--env=")] == [
        "--env=CUDA_VISIBLE_DEVICES=0,1", "--env=KERNELLAB_OPS=softmax and not softmax_triton"]
    image = argv.index("/shared/images/abc.sif")
    assert argv[image + 1:] == ["python", "-m", "kernellab.bench"]
    ours = [i for i, a in enumerate(argv) if a in ("--nv", "--cleanenv", "--home", "--bind", "--pwd")
            or a.startswith("--env=")]
    assert len(ours) == 7 and max(ours) < image  # apptainer's options, then the image, then the command
    cpu = runtimes.apptainer("/i.sif", ["true"], {}, ws, cache, False)
    assert "--nv" not in cpu and cpu[:3] == ["apptainer", "exec", "--cleanenv"]


def test_enroot_command_line_is_a_pyxis_job_step(tmp_path: Path) -> None:
    prof = profile.load(write(tmp_path / "site" / "cluster.toml",
                              'runtime = "enroot"\nshared = "shared"\n[gpu_types]\nh100 = "--gres=gpu:h100:1"\n'))
    sqsh = images.product(prof, "sha256:" + "0123456789ab" + "c" * 52)
    ws, cache = tmp_path / "ws", tmp_path / "cache"
    argv = runtimes.enroot(str(sqsh), ["python", "-m", "pytest"], ws, cache)
    assert argv[0] == "srun" and "--ntasks=1" in argv
    image = next(a for a in argv if a.startswith("--container-image="))
    # pyxis takes a value starting with / as a squashfs file (anything else is a registry image)
    assert image == f"--container-image={tmp_path}/site/shared/images/0123456789ab.sqsh"
    assert f"--container-mounts={ws}:/workspace,{cache}:/cache" in argv
    assert "--container-workdir=/workspace" in argv
    assert argv[-3:] == ["python", "-m", "pytest"]


def test_native_runs_in_the_nodes_python() -> None:
    assert runtimes.native(["python", "-m", "pytest", "-q"], "/usr/bin/python3.11") == [
        "/usr/bin/python3.11", "-m", "pytest", "-q"]
    assert runtimes.native(["bash", "-c", "python x.py"], "python3") == ["bash", "-c", "python x.py"]
    assert runtimes.native(["python3", "x.py"], "/opt/py") == ["python3", "x.py"]
    assert runtimes.native([], "python3") == []


def test_container_env_keeps_the_gpu_selection_and_never_the_hosts_home() -> None:
    host = {"CUDA_VISIBLE_DEVICES": "1", "SLURM_JOB_ID": "14", "HOME": "/home/me", "PATH": "/usr/bin",
            "LD_LIBRARY_PATH": "/host/lib", "USER": "me", "TERM": ""}
    env = runtimes.container_env({"KERNELLAB_RESULTS": "results/r/h100/x"}, host)
    assert env["CUDA_VISIBLE_DEVICES"] == "1" and env["SLURM_JOB_ID"] == "14" and env["USER"] == "me"
    assert env["HOME"] == "/cache/home"
    assert "/home/me" not in env.values()
    assert "PATH" not in env and "LD_LIBRARY_PATH" not in env and "TERM" not in env
    assert env["KERNELLAB_CACHE"] == "/cache" and env["PYTHONPATH"] == "/workspace/src"
    assert env["KERNELLAB_RESULTS"] == "results/r/h100/x"
    assert runtimes.container_env({"PYTHONPATH": "/mine"}, {})["PYTHONPATH"] == "/mine"  # the task's own wins


@pytest.mark.parametrize("runtime, tool", [("charliecloud", "ch-run"), ("apptainer", "apptainer"),
                                           ("enroot", "srun"), ("docker", "docker"), ("podman", "podman")])
def test_missing_tool_names_the_runtime_the_tool_and_the_remedy(
        monkeypatch: pytest.MonkeyPatch, runtime: str, tool: str) -> None:
    asked: list[str] = []

    def which(name: str) -> str | None:
        asked.append(name)
        return None

    monkeypatch.setattr(shutil, "which", which)
    message = runtimes.missing_tool(runtime)
    assert asked == [tool]
    assert message is not None
    assert f"runtime {runtime}" in message and f"`{tool}` is not on PATH" in message
    assert os.uname().nodename in message
    assert runtimes.TOOLS[runtime][1] in message
    monkeypatch.setattr(shutil, "which", lambda name: f"/usr/bin/{name}")
    monkeypatch.setattr(runtimes, "_srun_help", lambda: "      --container-image=[USER@][REGISTRY#]IMAGE[:TAG]|PATH")
    assert runtimes.missing_tool(runtime) is None


def test_enroot_needs_pyxis_not_just_srun(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A node's srun without the pyxis plugin: its help has no --container-image.
    write(tmp_path / "srun", "#!/bin/sh\necho 'Usage: srun [OPTIONS(0)...]'\necho '  -N, --nodes=N'\n").chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    message = runtimes.missing_tool("enroot")
    assert message is not None and "srun has no --container-image (pyxis is not loaded)" in message
    assert runtimes.TOOLS["enroot"][1] in message
    write(tmp_path / "srun", "#!/bin/sh\necho '      --container-image=[USER@][REGISTRY#]IMAGE[:TAG]|PATH'\n")
    assert runtimes.missing_tool("enroot") is None
    write(tmp_path / "srun", "#!/bin/sh\necho 'srun: error: invalid plugin' >&2\nexit 1\n")
    message = runtimes.missing_tool("enroot")
    assert message is not None and "`srun --help` failed" in message


def test_runtime_none_needs_no_tool(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(shutil, "which", lambda name: None)
    assert runtimes.missing_tool("none") is None


# ---------------------------------------------------------------- images


@pytest.mark.parametrize("runtime, fmt, suffix", [
    ("docker", "dir", ".bundle"), ("podman", "dir", ".bundle"), ("apptainer", "dir", ".sif"),
    ("enroot", "dir", ".sqsh"), ("charliecloud", "dir", ".ch"), ("charliecloud", "squash", ".sqfs")])
def test_product_path_per_runtime(tmp_path: Path, runtime: str, fmt: str, suffix: str) -> None:
    prof = make_profile(tmp_path, runtime=runtime, charliecloud_format=fmt)
    image_id = "sha256:0123456789abcdef" + "0" * 48
    assert images.short(image_id) == "0123456789ab"
    assert images.product(prof, image_id) == tmp_path / "shared" / "images" / f"0123456789ab{suffix}"


def _prepared(arch_list: str, kind: str = "cu130") -> Prepared:
    return Prepared("kernellab:cu130-pip", "sha256:" + "1" * 64, "", arch_list, kind, 0.0, False)


def test_check_archs() -> None:
    assert images.check_archs(_prepared("8.0;9.0"), ["h100", "a100"]) == []
    with pytest.raises(ClusterError) as e:
        images.check_archs(_prepared("8.0;9.0"), ["h100", "v100"])
    message = str(e.value)
    assert message.startswith("kernellab:cu130-pip cannot run on v100: ") and "7.0" in message
    assert message.endswith("nothing was submitted.") and e.value.exit_code == 2  # bad input, as in every task
    notes = images.check_archs(_prepared("8.0;9.0"), ["h100", "mi300x"])
    assert len(notes) == 1 and "mi300x" in notes[0] and "not checked" in notes[0]


def test_check_archs_notes_a_cpu_image() -> None:
    for cpu in (_prepared("", "cpu"), _prepared("8.0", "cpu"), _prepared("")):
        notes = images.check_archs(cpu, ["v100"])
        assert len(notes) == 1 and "CPU image" in notes[0]


# ---------------------------------------------------------------- kubernetes


def test_job_manifest_runs_each_task_as_one_pod_of_an_indexed_job(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    for k in list(os.environ):
        if k.startswith("KERNELLAB_"):
            monkeypatch.delenv(k)
    run = "20250102-030405-slurm-test-" + "x" * 60
    prof = make_profile(tmp_path, scheduler="kubernetes", throttle=2,
                        gpu_types={"h100": ["--gres=gpu:h100:1"], "rtx_6000": ["--gres=gpu:rtx6000:1"]},
                        kubernetes={"namespace": "lab", "image": "reg.example/kl:cu130",
                                    "gpu_resource": "nvidia.com/gpu.h100", "claim": "labshare",
                                    "node_selectors": {"h100": {"gpu": "h100"}}})
    tasks = runs._tasks(runs.Request("test", jobs.test().parts()), run, ["h100", "rtx_6000"])
    p = Plan(run=run, job="test", rundir=str(prof.shared / "runs" / run), runtime="docker", gpu_mode="",
             image={"ref": "kernellab:cu130"}, tasks=tasks)
    h100 = [t for t in tasks if t.gpu == "h100"]
    assert len(h100) >= 2
    m = json.loads(kube.job_manifest(p, prof, "h100"))
    assert (m["apiVersion"], m["kind"]) == ("batch/v1", "Job")
    name = m["metadata"]["name"]
    assert len(name) <= 63 and re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", name)
    assert m["metadata"]["namespace"] == "lab"
    spec = m["spec"]
    assert spec["completionMode"] == "Indexed" and spec["completions"] == len(h100) and spec["parallelism"] == 2
    pod = spec["template"]["spec"]
    assert pod["restartPolicy"] == "Never" and pod["nodeSelector"] == {"gpu": "h100"}
    assert pod["volumes"][0]["persistentVolumeClaim"]["claimName"] == "labshare"
    (c,) = pod["containers"]
    assert c["image"] == "reg.example/kl:cu130" and c["workingDir"] == "/workspace"
    assert c["resources"]["limits"] == {"nvidia.com/gpu.h100": 1}
    assert c["command"][:2] == ["bash", "-c"]
    lexer = shlex.shlex(c["command"][2], posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    words = list(lexer)
    assert words[:3] == ["case", "$JOB_COMPLETION_INDEX", "in"] and words[-1] == "esac"
    branches: dict[int, list[str]] = {}
    at = 3
    while words[at] != "esac":
        assert words[at + 1] == ")"
        end = words.index(";;", at)
        branches[int(words[at])] = words[at + 2:end]
        at = end + 1
    assert sorted(branches) == [t.index for t in h100]
    for t in h100:
        body = branches[t.index]
        assert body[body.index("exec") + 1:] == t.argv
        assert f"KERNELLAB_OPS={t.env['KERNELLAB_OPS']}" in body  # each pod tests its own op
        assert f"KERNELLAB_RESULTS={t.env['KERNELLAB_RESULTS']}" in body
    shared_env = {e["name"]: e["value"] for e in c["env"]}
    assert shared_env["KERNELLAB_RUN"] == run and shared_env["KERNELLAB_GPU_TYPE"] == "h100"
    assert "KERNELLAB_OPS" not in shared_env and shared_env["KERNELLAB_CACHE"] == f"{prof.shared}/cache"
    other = json.loads(kube.job_manifest(p, prof, "rtx_6000"))
    assert re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", other["metadata"]["name"])
    assert "nodeSelector" not in other["spec"]["template"]["spec"]


def test_each_pod_runs_its_own_task_with_its_own_variables(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The manifest's command, run by bash as the pod would for each index, with a stand-in python."""
    for k in list(os.environ):
        if k.startswith("KERNELLAB_"):
            monkeypatch.delenv(k)
    prof = make_profile(tmp_path, scheduler="kubernetes")
    p = make_plan(tmp_path, kind="test", gpus=("h100",), n=3)
    m = json.loads(kube.job_manifest(p, prof, "h100"))
    (c,) = m["spec"]["template"]["spec"]["containers"]
    fake = write(tmp_path / "bin" / "python",
                 '#!/bin/bash\nprintf "%s\\n" "$KERNELLAB_TASK" "$KERNELLAB_OPS" "$KERNELLAB_RESULTS" '
                 '"$KERNELLAB_RUN" "$@"\n')
    fake.chmod(0o755)
    for t in p.tasks:
        env = {"PATH": f"{fake.parent}:{os.environ['PATH']}", "JOB_COMPLETION_INDEX": str(t.index),
               **{e["name"]: e["value"] for e in c["env"]}}
        r = subprocess.run(c["command"], env=env, capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        assert r.stdout.splitlines() == [str(t.index), t.env["KERNELLAB_OPS"], t.env["KERNELLAB_RESULTS"],
                                         p.run, *t.argv[1:]]


# ---------------------------------------------------------------- runs


JUNIT = """<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest" errors="1" failures="2" skipped="3" tests="10" time="1.2">
<testcase classname="t" name="a"/></testsuite></testsuites>
"""


def test_junit_counts(tmp_path: Path) -> None:
    path = write(tmp_path / "junit.xml", JUNIT)
    assert runs.junit_counts(path) == {"passed": 4, "failed": 3, "skipped": 3}
    bare = write(tmp_path / "bare.xml", '<testsuite tests="2" failures="0" errors="0" skipped="1"/>')
    assert runs.junit_counts(bare) == {"passed": 1, "failed": 0, "skipped": 1}
    assert runs.junit_counts(tmp_path / "missing.xml") is None
    assert runs.junit_counts(write(tmp_path / "cut.xml", "<testsuites><testsuite")) is None


def test_outcome_from_the_status_file_or_slurms_state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(follow, "STATUS_GRACE_S", 0)
    p = make_plan(tmp_path)
    done, failed, timed_out, lost = p.tasks_of("h100") + p.tasks_of("a100")
    node.write_status(p.status_file(done), {"exit": 0, "host": "node7"})
    node.write_status(p.status_file(failed), {"exit": 1})
    log = write(Path(p.rundir) / "logs" / "h100-0-12.log", "ran\n")

    o = follow.outcome(p, done, slurm.TaskState("COMPLETED", exit="0:0"))
    assert (o.state, o.ok, o.detail, o.status["host"], o.log) == ("done", True, "", "node7", str(log))
    o = follow.outcome(p, failed, slurm.TaskState("FAILED", exit="1:0"))
    assert (o.state, o.ok, o.detail) == ("failed", False, "exited with 1")
    node.write_status(p.status_file(failed), {"exit": 127, "error": "runtime apptainer is not available"})
    assert follow.outcome(p, failed, slurm.TaskState("FAILED")).detail == "runtime apptainer is not available"

    o = follow.outcome(p, timed_out, slurm.TaskState("TIMEOUT", "TimeLimit", "0:15"))
    assert (o.state, o.detail, o.status, o.log) == ("timeout", "ran past its time limit", {}, "")
    assert follow.outcome(p, timed_out, slurm.TaskState("CANCELLED")).state == "cancelled"
    # Slurm's SIGTERM at the limit can reach the command before the runner, which then records exit -15:
    # Slurm's state says why it ended, and the status file is kept.
    node.write_status(p.status_file(timed_out), {"exit": -15, "host": "node7"})
    o = follow.outcome(p, timed_out, slurm.TaskState("TIMEOUT", "TimeLimit", "0:15"))
    assert (o.state, o.detail, o.status["host"]) == ("timeout", "ran past its time limit", "node7")
    assert follow.outcome(p, timed_out, slurm.TaskState("OUT_OF_MEMORY")).detail == "ran out of memory"
    node.write_status(p.status_file(timed_out), {"exit": 0})  # finished just as the limit came: done
    assert follow.outcome(p, timed_out, slurm.TaskState("TIMEOUT")).state == "done"
    p.status_file(timed_out).unlink()
    # Ended with neither log nor status: Slurm could not even open the log, so the node never saw the folder.
    for state, outcome, said in (("FAILED", "failed", "failed (exit 1:0) "), ("COMPLETED", "lost", "ended (completed) ")):
        o = follow.outcome(p, timed_out, slurm.TaskState(state, exit="1:0"))
        assert o.state == outcome and f"{said}without writing its log or status file into {p.rundir}" in o.detail
        assert "`shared`" in o.detail and str(tmp_path / "shared") in o.detail and "same path" in o.detail
    # A task that never started has no log either, and says why instead.
    assert follow.outcome(p, timed_out, slurm.TaskState("BOOT_FAIL")).detail == \
        "never started: its node failed to boot (BOOT_FAIL)"
    write(Path(p.rundir) / "logs" / "a100-0-13.log", "python3: not found\n")
    o = follow.outcome(p, timed_out, slurm.TaskState("FAILED", exit="1:0"))
    assert o.state == "failed" and "exit 1:0" in o.detail

    write(Path(p.rundir) / "logs" / "a100-1-13.log", "ran\n")
    o = follow.outcome(p, lost, slurm.TaskState("COMPLETED", exit="0:0"))
    assert o.state == "lost" and not o.ok
    assert str(p.status_file(lost)) in o.detail
    assert "`shared`" in o.detail and str(tmp_path / "shared") in o.detail


def test_a_task_that_left_the_queue_while_pending_ended_before_it_started(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`scancel` of a pending array task: no log, last seen pending. Not a shared-folder problem (the task never
    ran); only a task with a log but no status file asks whether `shared` is shared."""
    monkeypatch.setattr(follow, "STATUS_GRACE_S", 0)
    p = make_plan(tmp_path)
    never, ran = p.tasks_of("h100")
    for state in ("PENDING", "REQUEUED"):
        o = follow.outcome(p, never, slurm.TaskState(state, "Priority"))
        assert (o.state, o.ok, o.log, o.status) == ("cancelled", False, "", {})
        assert o.detail.startswith("ended before it started: it left the queue while pending, without a log")
        assert "cancelled with scancel or removed by the scheduler" in o.detail
        assert f"`--resume {p.run}` runs it again" in o.detail
        assert "`shared`" not in o.detail and "status file" not in o.detail
    log = write(Path(p.rundir) / "logs" / "h100-1-12.log", "started\n")
    o = follow.outcome(p, ran, slurm.TaskState("PENDING"))
    assert (o.state, o.log) == ("lost", str(log))
    assert f"ended (pending) but its status file never appeared at {p.status_file(ran)}" in o.detail
    assert "`shared`" in o.detail and str(tmp_path / "shared") in o.detail


def test_following_a_task_cancelled_while_pending(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Pending, then gone from squeue and scontrol (twice, no status file): its last state, pending, decides."""
    import io

    p = make_plan(tmp_path, gpus=("h100",), n=2)
    t0, t1 = p.tasks
    polls = iter([{("7", 0): slurm.TaskState("RUNNING", "node1"), ("7", 1): slurm.TaskState("PENDING", "Priority")},
                  {("7", 0): slurm.TaskState("COMPLETED")}, {}])
    monkeypatch.setattr(slurm, "states", lambda jobs: next(polls))
    monkeypatch.setattr(follow, "STATUS_GRACE_S", 0)
    node.write_status(p.status_file(t0), {"exit": 0})
    done, gone = follow.follow(p, [(t0, "7"), (t1, "7")], io.StringIO(), 0)
    assert (done.state, gone.state) == ("done", "cancelled")
    assert gone.detail.startswith("ended before it started") and "`shared`" not in gone.detail


def test_progress_words_and_counts() -> None:
    word = runs.progress_word
    assert word(slurm.TaskState("PENDING", "Resources")) == "pending (Resources)"
    assert word(slurm.TaskState("PENDING", "None")) == "pending"
    assert word(slurm.TaskState("RUNNING", "node17")) == "running on node17"
    assert [word(slurm.TaskState(s)) for s in ("COMPLETED", "FAILED", "TIMEOUT", "NODE_FAIL", "CANCELLED")] == [
        "done", "failed", "timed out", "failed", "cancelled"]
    assert word(slurm.TaskState("SPECIAL_EXIT")) == "special_exit"
    words = ["done", "pending (Priority)", "running on node1", "done", "timed out", "failed"]
    assert runs.progress_counts(words) == "2 done, 1 running, 1 pending, 1 failed, 1 timed out of 6"


def test_following_prints_each_change_and_how_many_tasks_are_in_each_state(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import io

    p = make_plan(tmp_path, gpus=("h100",), n=2)
    t0, t1 = p.tasks
    polls = iter([{("7", 0): slurm.TaskState("RUNNING", "node1"), ("7", 1): slurm.TaskState("PENDING", "Resources")},
                  {("7", 0): slurm.TaskState("RUNNING", "node1"), ("7", 1): slurm.TaskState("PENDING", "Resources")},
                  {("7", 0): slurm.TaskState("COMPLETED"), ("7", 1): slurm.TaskState("RUNNING", "node1")},
                  {("7", 1): slurm.TaskState("FAILED", exit="2:0")}])
    monkeypatch.setattr(slurm, "states", lambda jobs: next(polls))
    monkeypatch.setattr(follow, "STATUS_GRACE_S", 0)
    for t, code in ((t0, 0), (t1, 2)):
        node.write_status(p.status_file(t), {"exit": code})
    out = io.StringIO()
    outcomes = follow.follow(p, [(t0, "7"), (t1, "7")], out, 0)
    assert [o.state for o in outcomes] == ["done", "failed"]
    assert out.getvalue().splitlines() == [
        "  h100/task-0: running on node1", "  h100/task-1: pending (Resources)", "  [1 running, 1 pending of 2]",
        "  h100/task-0: done", "  h100/task-1: running on node1", "  [1 done, 1 running of 2]",
        "  h100/task-1: failed", "  [1 done, 1 failed of 2]"]


def test_an_interrupted_submission_cancels_and_names_the_jobs_it_had_submitted(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import io

    p = make_plan(tmp_path)
    Path(p.rundir).mkdir(parents=True)
    answers = iter(["41", KeyboardInterrupt()])

    def submit(path: Path) -> str:
        a = next(answers)
        if isinstance(a, BaseException):
            raise a
        return a

    cancelled: list[list[str]] = []
    monkeypatch.setattr(slurm, "submit", submit)
    monkeypatch.setattr(slurm, "cancel", lambda jobs: cancelled.append(list(jobs)))
    out = io.StringIO()
    with pytest.raises(KeyboardInterrupt):
        runs._submit(p, make_profile(tmp_path), {"h100": [0, 1], "a100": [0, 1]}, out)
    assert cancelled == [["41"]]
    assert "cancelled job(s) 41 (scancel): the run was not submitted whole" in out.getvalue()


def test_ctrl_c_between_submitting_and_following_cancels_every_job(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                                                   ) -> None:
    """The window after the last `submitted job` line and before following began (a CI run hit it): Ctrl-C there
    cancels what was submitted and says so, as it does while following."""
    import io

    from kernellab import ROOT

    ids = iter(["41", "42"])
    cancelled: list[list[str]] = []
    monkeypatch.setattr(slurm, "reachable", lambda: None)
    monkeypatch.setattr(slurm, "submit", lambda path: next(ids))
    monkeypatch.setattr(slurm, "cancel", lambda jobs: cancelled.append(list(jobs)))
    monkeypatch.setattr(runs, "snapshot", lambda dest, root=None: dest.mkdir(parents=True) or 0)
    monkeypatch.setattr(runs, "_run_name", lambda kind: f"{RUN}-slurm-{kind}")  # (bench.runner's would load torch)
    real_record = runs.record
    calls: list[int] = []

    def record(*args: Any) -> Path:
        calls.append(1)
        if len(calls) == 1:  # the first record, right after submitting: Ctrl-C lands here
            raise KeyboardInterrupt
        return real_record(*args)

    monkeypatch.setattr(runs, "record", record)
    req = runs.Request("submit", jobs.submit("true").parts())
    out = io.StringIO()
    try:
        with pytest.raises(ClusterError) as e:
            runs.start(req, make_profile(tmp_path, runtime="none"), out=out)
    finally:
        shutil.rmtree(ROOT / "results" / f"{RUN}-slurm-submit", ignore_errors=True)
    assert e.value.exit_code == 130 and "cancelled job(s) 41, 42" in str(e.value)
    assert cancelled == [["41", "42"]]


def _outcomes(p: Plan) -> list[runs.Outcome]:
    out = []
    for t in p.tasks:
        ok = (t.gpu, t.index) != ("a100", 1)
        status = {"exit": 0, "host": f"node-{t.gpu}", "seconds": 1.5,
                  "gpus": [{"index": "0", "name": "GPU", "uuid": f"GPU-{t.gpu}-{t.index}"}]} if ok else {}
        out.append(runs.Outcome(t, "done" if ok else "timeout", "" if ok else "ran past its time limit", status))
    return out


def test_merge_of_a_submit_run_writes_one_row_per_task(tmp_path: Path) -> None:
    p = make_plan(tmp_path, kind="submit")
    local = tmp_path / "results" / p.run
    local.mkdir(parents=True)
    text = runs.merge(p, _outcomes(p), local)
    assert (local / "summary.md").read_text() == text
    assert text.startswith(f"# submit run {p.run} on h100, a100 (none)")
    rows = [line for line in text.splitlines() if line.startswith("| ") and not line.startswith("| GPU type")]
    assert len(rows) == len(p.tasks) == 4
    cells = [[c.strip() for c in row.strip("|").split("|")] for row in rows]
    assert [c[:2] for c in cells] == [[t.gpu, t.name] for t in p.tasks]
    assert cells[0] == ["h100", "task-0", "done", "node-h100", "GPU-h100-0", "1.5"]
    assert cells[3] == ["a100", "task-1", "timeout: ran past its time limit", "-", "-", "-"]


def test_merge_of_a_test_run_counts_each_ops_junit_file(tmp_path: Path) -> None:
    p = make_plan(tmp_path, kind="test")
    local = tmp_path / "results" / p.run
    write(local / "h100" / "softmax" / "junit.xml", JUNIT)
    text = runs.merge(p, _outcomes(p), local)
    lines = text.splitlines()
    assert "| op | h100 | a100 |" in lines
    assert "| softmax | 4 passed, 3 failed, 3 skipped | done |" in lines
    assert "| vector_add | done | timeout |" in lines


# ---------------------------------------------------------------- node


def _host_gpus() -> list[gpu.HostGpu]:
    return [gpu.HostGpu(0, "NVIDIA H100 80GB HBM3", "GPU-aaaa", "9.0", "560.35", 81559),
            gpu.HostGpu(1, "NVIDIA H100 80GB HBM3", "GPU-bbbb", "9.0", "560.35", 81559)]


def test_given_gpus_are_the_ones_slurm_gave(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gpu, "host_gpus", _host_gpus)
    assert node.given_gpus({"SLURM_JOB_GPUS": "1"}) == [{"index": "1", "name": "NVIDIA H100 80GB HBM3",
                                                         "uuid": "GPU-bbbb"}]
    assert [g["uuid"] for g in node.given_gpus({})] == ["GPU-aaaa", "GPU-bbbb"]
    assert node.given_gpus({"CUDA_VISIBLE_DEVICES": "GPU-aaaa"}) == [
        {"index": "0", "name": "NVIDIA H100 80GB HBM3", "uuid": "GPU-aaaa"}]


def test_write_status_writes_whole_json_by_renaming(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "status" / "h100" / "3.json"
    renames: list[tuple[str, str, Any, bool]] = []
    real_replace = os.replace

    def replace(src: Any, dst: Any) -> None:
        # what a reader could see at the final path: nothing until the whole file is there
        renames.append((str(src), str(dst), json.loads(Path(src).read_text()), Path(dst).exists()))
        real_replace(src, dst)

    monkeypatch.setattr(node.os, "replace", replace)
    node.write_status(path, {"exit": 0, "gpus": [{"uuid": "GPU-bbbb"}]})
    assert json.loads(path.read_text()) == {"exit": 0, "gpus": [{"uuid": "GPU-bbbb"}]}
    ((src, dst, content, existed),) = renames
    assert dst == str(path) and Path(src).parent == path.parent and src != dst
    assert content == {"exit": 0, "gpus": [{"uuid": "GPU-bbbb"}]} and not existed
    node.write_status(path, {"exit": 2})
    assert json.loads(path.read_text()) == {"exit": 2}
    assert [p.name for p in path.parent.iterdir()] == ["3.json"]


def _native_plan(tmp_path: Path, code: str) -> Plan:
    p = make_plan(tmp_path, gpus=("h100",), n=1, runtime="none", python=sys.executable)
    p.tasks[0].argv = ["python", "-c", code]
    p.workspace.mkdir(parents=True)
    p.save()
    return p


def test_node_main_runs_a_task_natively_and_writes_its_status(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gpu, "host_gpus", list)
    monkeypatch.setenv("KERNELLAB_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("SLURM_ARRAY_JOB_ID", "12")
    code = ("import os, pathlib; pathlib.Path(os.environ['KERNELLAB_RESULTS'], 'out.txt')"
            ".write_text(os.environ['KERNELLAB_GPU_TYPE'] + ' ' + os.environ['KERNELLAB_TASK'])")
    p = _native_plan(tmp_path, code)
    assert node.main([str(Path(p.rundir) / "plan.json"), "h100", "0"]) == 0
    t = p.task("h100", 0)
    assert (p.workspace / p.results_of(t) / "out.txt").read_text() == "h100 0"
    status = json.loads(p.status_file(t).read_text())
    assert (status["exit"], status["run"], status["gpu_type"], status["index"], status["name"]) == (
        0, p.run, "h100", 0, "task-0")
    assert status["slurm_job"] == "12_0" and status["runtime"] == "none" and status["gpus"] == []
    assert "error" not in status


@pytest.mark.parametrize("profile_mode, best, attached", [("", "devices", "devices"), ("", None, "none"),
                                                         ("cdi", "nvidia", "cdi"), ("none", "nvidia", "none")])
def test_a_container_task_takes_the_profiles_gpu_mode_else_the_nodes_best(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch,
                                                                          profile_mode: str, best: str | None,
                                                                          attached: str) -> None:
    from kernellab.container import runner

    p = make_plan(tmp_path, runtime="docker")
    p.gpu_mode = profile_mode
    monkeypatch.setattr(runner, "best_gpu_mode", lambda eng=None: best)
    assert node.gpu_mode(p, object()) == attached


def test_node_main_reports_a_failing_task_and_a_missing_runtime(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gpu, "host_gpus", list)
    monkeypatch.setenv("KERNELLAB_CACHE", str(tmp_path / "cache"))
    p = _native_plan(tmp_path, "raise SystemExit(3)")
    plan_json = str(Path(p.rundir) / "plan.json")
    assert node.main([plan_json, "h100", "0"]) == 3
    assert json.loads(p.status_file(p.tasks[0]).read_text())["exit"] == 3

    p.runtime = "apptainer"
    p.save()
    monkeypatch.setattr(shutil, "which", lambda name: None)
    assert node.main([plan_json, "h100", "0"]) == 127
    status = json.loads(p.status_file(p.tasks[0]).read_text())
    assert status["exit"] == 127 and "runtime apptainer is not available" in status["error"]
    assert node.main([plan_json, "h100"]) == 2
    assert node.main([plan_json, "h100", "x"]) == 2
