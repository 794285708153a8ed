"""The run seam: every run task takes the same place flags, and the flags pick one place.

Jobs are data (kernellab.jobs); places run them (kernellab.places). The container path is proven by the
docker and GPU tests, which run real containers; here: which place the flags choose, how a job's paths
reach each place, and a real native run.
"""
from __future__ import annotations

import sys

import pytest

from kernellab import ROOT, jobs, places
from kernellab.cli import collection
from kernellab.cluster.plan import task_argv
from kernellab.errors import ClusterError, UsageError
from places_fixtures import context

RUN_TASKS = ("shell", "test", "bench", "build-kernels", "watch", "profile", "sanitize")


def test_every_run_task_takes_the_same_place_flags_with_one_help_each() -> None:
    ns = collection()
    want = {name.replace("_", "-") for name in places.PLACE_HELP}
    for name in RUN_TASKS:
        helps = {a.name.replace("_", "-"): a.help for a in ns[name].get_arguments()}
        assert want <= set(helps), f"{name} lacks {sorted(want - set(helps))}"
        for flag, text in places.PLACE_HELP.items():
            assert helps[flag.replace("_", "-")] == text, f"{name} --{flag}"


def test_the_flags_choose_one_place() -> None:
    c = context()
    assert places.choose(c, places.Flags(native=True, gpu_index="1")) == places.Native("1")
    assert places.choose(c, places.Flags(image="img:1")) == places.Container("img:1", True, None)
    assert places.choose(c, places.Flags(image="img:1", gpu_mode="none", gpu_index=None)) == places.Container("img:1", False)
    assert places.choose(c, places.Flags(image="img:1", gpu_mode="cdi", gpu_index="0,1")) == places.Container("img:1", "cdi", "0,1")
    cluster = places.choose(context(target="cu130-pip"), places.Flags(on="slurm", gpus="h100", dry_run=True))
    assert isinstance(cluster, places.Cluster) and cluster.target == "cu130-pip" and cluster.gpus == "h100"
    assert isinstance(places.choose(c, places.Flags(resume="results/x")), places.Cluster)


@pytest.mark.parametrize("flags, message", [
    ({"native": True, "image": "img:1"}, "--image is for a container; --native runs in this Python"),
    ({"native": True, "gpu_mode": "none"}, "--gpu-mode is for a container"),
    ({"on": "slurm", "native": True}, "--native is for this machine; a cluster run uses the target's image"),
    ({"gpus": "h100"}, "--gpus, --cluster and --dry-run are for cluster runs; add --on slurm"),
    ({"on": "pbs"}, "--on pbs: kernellab submits to slurm"),
    ({"native": True, "host": "ssh://gpu-box"}, "--host is for a container; --native runs in this Python"),
    ({"on": "slurm", "host": "ssh://gpu-box"}, "--host is another machine's Docker engine; a cluster run uses"),
    ({"host": "gpu-box"}, r"--host gpu-box: give ssh://\[user@\]host\[:port\]"),
    ({"host": "ssh://me@gpu-box:x"}, "the port is not a number"),
])
def test_flags_that_do_not_go_together_are_one_sentence_and_exit_2(flags: dict, message: str) -> None:
    with pytest.raises((UsageError, ClusterError), match=message) as e:
        places.choose(context(), places.Flags(**flags))
    assert e.value.exit_code == 2


def test_a_native_job_runs_in_this_python_from_the_repository_with_its_variables() -> None:
    job = jobs.Job("x", ("python", "-c", "import os, sys; sys.exit(int(os.environ['KL_X']) + "
                                          "(os.getcwd() == os.environ['KL_ROOT']) + (sys.executable == os.environ['KL_PY']))"),
                   env={"KL_X": "3", "KL_ROOT": str(ROOT), "KL_PY": sys.executable})
    assert places.Native().run(job) == 5


def test_repository_paths_map_to_workspace_and_others_are_refused(tmp_path) -> None:
    job = jobs.profile("softmax", out=str(ROOT / "results" / "p"), kernels=str(ROOT / "kernels"))
    mapped = job.with_paths(places.in_workspace)
    assert mapped[mapped.index("--out") + 1] == "/workspace/results/p"
    assert mapped[mapped.index("--kernels") + 1] == "/workspace/kernels"
    with pytest.raises(UsageError, match=f"{tmp_path} is outside the repository, which is all the container sees"):
        jobs.sanitize("softmax", kernels=str(tmp_path)).with_paths(places.in_workspace)


def test_on_a_cluster_a_job_writes_where_its_task_gathers() -> None:
    assert places.cluster_command(jobs.profile("softmax")) == (
        "bash", "-c", 'python -m kernellab.nsight.profile -k softmax --set basic --out "$KERNELLAB_RESULTS"')
    assert places.cluster_command(jobs.sanitize("relu_oob", tool="racecheck")) == (
        "bash", "-c", "python -m kernellab.nsight.sanitize -k relu_oob --tool racecheck")
    with pytest.raises(ClusterError, match="`invoke watch` needs this terminal") as e:
        places.Cluster().run(jobs.Job("watch", ("python",), interactive=True))
    assert e.value.exit_code == 2


def test_a_cluster_task_runs_the_same_command_lines_as_the_tasks() -> None:
    (part,) = [p for p in jobs.test("softmax").parts() if p.name == "softmax"]
    argv, _ = task_argv(part.argv, "r1", "h100", "softmax")
    assert argv == [*jobs.test().argv, "--junitxml", "results/r1/h100/softmax/junit.xml"]
    assert part.env["KERNELLAB_OPS"] == "softmax and not softmax_triton"
    (part,) = jobs.bench("vector_add", quick=True).parts()
    argv, _ = task_argv(part.argv, "r1", "h100", "vector_add")
    assert argv == ["python", "-m", "kernellab.bench", "-k", "vector_add", "--quick", "--out",
                    "results/r1/h100/vector_add"]


def test_flags_are_long_and_mean_the_same_in_every_task() -> None:
    ns = collection()
    for name in ns.task_names:
        for arg in (a for a in ns[name].get_arguments() if not a.positional):
            assert all(n for n in arg.names), f"{name}: a flag without a name ({arg.names})"
            assert all(len(n) > 1 for n in arg.names if n != "k"), f"{name}: a short flag {arg.names}"


def test_a_targets_image_is_inspected_once_and_travels_as_a_value(monkeypatch) -> None:
    from fake_engine import fake, image
    from kernellab.container import runner
    from kernellab.image import builder

    eng = fake("docker", {"kernellab:cpu": image("sha256:c0ffee", env=["PATH=/opt/venv/bin:/usr/bin"],
                                                 labels={"kernellab.arch-list": "9.0"})})
    asked: list[str] = []
    real = eng.inspect
    monkeypatch.setattr(eng, "inspect", lambda ref: asked.append(ref) or real(ref))
    found = builder.image_for_target("cpu", engine=eng)
    assert (found.ref, found.id, found.labels["kernellab.arch-list"]) == ("kernellab:cpu", "sha256:c0ffee", "9.0")
    argv = runner.run_argv(found, ["true"], user=(1, 1), engine=eng)
    assert asked == ["kernellab:cpu"], "one inspect for the lookup, none for the container's command line"
    assert argv[argv.index("KERNELLAB_IMAGE_ID=sha256:c0ffee") - 1] == "-e" and "kernellab:cpu" in argv


def test_a_job_with_an_output_file_a_scratch_folder_and_a_timeout_runs_natively(tmp_path) -> None:
    """A recipe case on a cluster node: its output to a file, $KERNELLAB_OUT its scratch folder, stopped at its
    timeout with exit code 124 (the job runs far longer than it is given: no timing race)."""
    out, scratch = tmp_path / "case.txt", tmp_path / "scratch"
    scratch.mkdir()
    job = jobs.Job("recipe-case", ("bash", "-c", 'echo "out=$KERNELLAB_OUT"; echo made > "$KERNELLAB_OUT/f"; exit 3'),
                   output=out, scratch=scratch, timeout=600)
    assert places.Native().run(job) == 3
    assert out.read_text() == f"out={scratch.resolve()}\n" and (scratch / "f").read_text() == "made\n"
    slow = jobs.Job("recipe-case", ("bash", "-c", "echo started; exec sleep 600"), output=out, timeout=0.5)
    assert places.Native().run(slow) == 124 and out.read_text() == "started\n"
    with pytest.raises(UsageError, match="only a container can"):
        places.Native().run(jobs.Job("recipe-input", ("true",), mounts=("/a:/b",), output=out))


def test_a_recipe_case_and_a_recipe_task_are_jobs_like_any_other(tmp_path) -> None:
    case = jobs.recipe_case("./bench 10", "build", output=tmp_path / "o.txt", scratch=tmp_path, timeout=60,
                            mounts=("/data:/inputs/g:ro",))
    assert case.argv == ("bash", "-eo", "pipefail", "-c", "cd /src/build\n./bench 10") and case.gpu
    assert (case.timeout, case.mounts) == (60, ("/data:/inputs/g:ro",))
    job = jobs.recipe_run("/repo/recipes/demo", ["blocked", "tiled"], quick=True)
    assert [p.name for p in job.parts()] == ["blocked", "tiled"] and job.merger == "kernellab.recipes.on_cluster:merge"
    argv, env = task_argv(job.parts()[1].argv, "run1", "h100", "tiled")
    assert argv == ["python", "-m", "kernellab.recipes.on_node", "/repo/recipes/demo", "tiled", "--quick", "--out",
                    "results/run1/h100/tiled"] and env["KERNELLAB_RESULTS"] == "results/run1/h100/tiled"


def test_a_native_jobs_timeout_stops_everything_it_started(tmp_path) -> None:
    """A case's shell started a pipeline: at the timeout none of it may go on (holding the GPU, writing its file)."""
    import os
    import time

    pid_file = tmp_path / "pid"
    job = jobs.Job("recipe-case", ("bash", "-c", f"sleep 600 & echo $! > {pid_file}; wait"), output=tmp_path / "o",
                   timeout=1)
    assert places.Native().run(job) == 124
    child = int(pid_file.read_text())
    for _ in range(100):  # the killed child is reaped by init: wait for that, not for a time
        try:
            os.kill(child, 0)
        except ProcessLookupError:
            break
        time.sleep(0.05)
    else:
        raise AssertionError(f"the job's child {child} outlived its timeout")


def test_a_container_job_without_a_gpu_attaches_no_gpu_index(monkeypatch, tmp_path) -> None:
    """A recipe's input is made without a GPU: --gpu-index is for its cases, not a reason to refuse the input."""
    seen: list[dict] = []
    monkeypatch.setattr(places.runner, "run", lambda image, argv, **kw: seen.append(kw) or 0)
    place = places.Container("img", "nvidia", "0")
    place.run(jobs.recipe_input("true", output=tmp_path / "log", mounts=()))
    place.run(jobs.recipe_case("true", ".", output=tmp_path / "o", scratch=tmp_path, timeout=60))
    assert (seen[0]["gpu"], seen[0]["gpu_index"]) == (False, None)
    assert (seen[1]["gpu"], seen[1]["gpu_index"]) == ("nvidia", "0")


def test_profile_and_sanitize_pass_the_pass_of_an_op_with_a_backward() -> None:
    assert "--pass" not in jobs.profile("softmax").argv and "--pass" not in jobs.sanitize("softmax").argv
    argv = jobs.profile("rmsnorm_cpu", which="backward").argv
    assert argv[argv.index("--pass") + 1] == "backward"
    argv = jobs.sanitize("rmsnorm_cpu", which="forward").argv
    assert argv[argv.index("--pass") + 1] == "forward"


def test_a_servers_driver_is_read_from_what_its_shell_lists(monkeypatch) -> None:
    """devices mode on another machine: its nodes and its ldconfig's driver libraries, not this machine's."""
    from kernellab import proc, remote

    listing = ("/dev/nvidia1\n/dev/nvidia0\n/dev/nvidiactl\n/dev/nvidia-uvm\n---\n"
               "\tlibcuda.so.1 (libc6,x86-64) => /usr/lib/x86_64-linux-gnu/libcuda.so.1\n"
               "\tlibz.so.1 (libc6,x86-64) => /lib/x86_64-linux-gnu/libz.so.1\n---\n/usr/bin/nvidia-smi\n")
    host = remote.SshHost(remote.Address.parse("ssh://me@gpu-box"))
    monkeypatch.setattr(host, "run", lambda command, **kw: proc.Result(["ssh"], 0, listing, ""))
    nodes, files = host.driver()
    assert nodes == ["/dev/nvidia0", "/dev/nvidia1", "/dev/nvidiactl", "/dev/nvidia-uvm"]
    assert files == {"/usr/lib/x86_64-linux-gnu/libcuda.so.1": "/usr/local/nvidia/lib64/libcuda.so.1",
                     "/usr/bin/nvidia-smi": "/usr/local/nvidia/bin/nvidia-smi"}
