"""Only the GPUs a run was given: the selection (--gpu-index, Slurm, CUDA_VISIBLE_DEVICES), the
engine flags that attach just those in every mode, the tasks' --gpu-index, and the bench's record
of the GPU it really used.

No engine and no GPU needed: a fake host GPU list, a fake engine and a captured command line; the
docker- and gpu-marked tests run the same command lines for real.
"""
from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from invoke import Config, Context, Exit

from fake_engine import fake, image
from kernellab import engine, gpu, proc
from kernellab.cli import bench as bench_task
from kernellab.cli import containers as container_tasks
from kernellab.container import runner
from kernellab.errors import KernellabError

HOST = [gpu.HostGpu(i, "NVIDIA H100 80GB HBM3", f"GPU-{c * 8}-1111-2222-3333-444444444444", "9.0", "580.1", 81559)
        for i, c in enumerate("abcd")]
IMG = {"img:1": image("sha256:feed", env=["PATH=/opt/venv/bin:/usr/bin"])}
IMG["kernellab:cpu"] = IMG["img:1"]  # the target the tasks run (_ctx): the real builder.image_for_target finds it
NODES = ["/dev/nvidia0", "/dev/nvidia1", "/dev/nvidia2", "/dev/nvidia3", "/dev/nvidiactl", "/dev/nvidia-uvm",
         "/dev/nvidia-uvm-tools", "/dev/nvidia-modeset"]
CONTROL = NODES[4:]


def _select(explicit: str | int | None = None, **environ: str) -> list[str] | None:
    return gpu.selected_gpus(explicit, environ, HOST)


# ------------------------------------------------------------------ the selection


def test_without_a_flag_or_variable_every_gpu_is_allowed_and_nvidia_smi_is_not_asked(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gpu, "host_gpus", lambda: pytest.fail("no selection: nothing to check against the host"))
    assert gpu.selected_gpus(None, {"PATH": "/usr/bin", "SLURM_JOB_GPUS": ""}) is None


def test_an_explicit_index_wins_over_every_variable() -> None:
    env = {"SLURM_JOB_GPUS": "0", "CUDA_VISIBLE_DEVICES": "3"}
    assert _select("2", **env) == ["2"]
    assert _select(1, **env) == ["1"]
    assert _select("3, 1", **env) == ["1", "3"], "ascending: a container's CUDA numbers GPUs in the driver's order"


def test_slurm_gpus_are_host_indices_and_win_over_cuda_visible_devices() -> None:
    # Under a device cgroup Slurm may set CUDA_VISIBLE_DEVICES=0 (relative); SLURM_JOB_GPUS is the host's.
    assert _select(SLURM_JOB_GPUS="2,3", CUDA_VISIBLE_DEVICES="0,1") == ["2", "3"]
    assert _select(SLURM_JOB_GPUS="1,2,3", SLURM_STEP_GPUS="3") == ["3"], "a step's GPUs are the narrower set"
    assert _select(SLURM_JOB_GPUS="", CUDA_VISIBLE_DEVICES="1") == ["1"], "an empty Slurm variable says nothing"


def test_cuda_visible_devices_by_index_uuid_or_unique_uuid_prefix() -> None:
    assert _select(CUDA_VISIBLE_DEVICES="1") == ["1"]
    assert _select(CUDA_VISIBLE_DEVICES=HOST[2].uuid) == ["2"]
    assert _select(CUDA_VISIBLE_DEVICES="GPU-dddd,0") == ["0", "3"]
    assert _select(CUDA_VISIBLE_DEVICES="gpu-BBBB") == ["1"], "UUIDs compare without regard to case"


@pytest.mark.parametrize("value", ["", "-1", "NoDevFiles"])
def test_a_cuda_visible_devices_that_hides_every_gpu_selects_none(value: str) -> None:
    assert _select(CUDA_VISIBLE_DEVICES=value) == []


@pytest.mark.parametrize("explicit,environ,says", [
    ("7", {}, "--gpu-index 7 names GPU '7', which this machine does not have"),
    (None, {"SLURM_JOB_GPUS": "1,9"}, "SLURM_JOB_GPUS=1,9 names GPU '9'"),
    (None, {"CUDA_VISIBLE_DEVICES": "GPU-ffff"}, "CUDA_VISIBLE_DEVICES=GPU-ffff names GPU 'GPU-ffff'"),
    (None, {"CUDA_VISIBLE_DEVICES": "GPU-"}, "names more than one GPU"),
    ("first", {}, "--gpu-index first names GPU 'first'"),
    ("", {}, "--gpu-index '' names GPU ''"),
    (None, {"CUDA_VISIBLE_DEVICES": "MIG-1234"}, "names a MIG instance (MIG-1234)"),
])
def test_a_selection_the_host_cannot_meet_is_one_sentence_naming_its_gpus(
        explicit: str | None, environ: dict[str, str], says: str) -> None:
    with pytest.raises(KernellabError) as e:
        gpu.selected_gpus(explicit, environ, HOST)
    message = str(e.value)
    assert says in message
    assert "0 (NVIDIA H100 80GB HBM3, GPU-aaaaaaaa-" in message and "3 (NVIDIA H100" in message
    assert message.endswith(".") and "\n" not in message


def test_on_a_machine_without_gpus_any_index_is_refused() -> None:
    with pytest.raises(KernellabError, match="none that nvidia-smi can see"):
        gpu.selected_gpus("0", {}, [])


def test_natively_the_choice_is_passed_by_uuid() -> None:
    # CUDA's own order (fastest first) need not be nvidia-smi's: a UUID is the GPU either way.
    assert gpu.visible_devices("1", HOST) == HOST[1].uuid
    assert gpu.visible_devices("2,0", HOST) == f"{HOST[0].uuid},{HOST[2].uuid}"


# ------------------------------------------------------------------ the container's command line


def _argv(kind: str, mode: str, gpus: list[str] | None) -> list[str]:
    return runner.run_argv("img:1", ["nvidia-smi"], gpu_mode=mode, gpus=gpus, user=(1, 1), repo=gpu.DRIVER_DIR,
                               cache=gpu.DRIVER_DIR, engine=fake(kind, IMG))


def _flags(argv: list[str], flag: str) -> list[str]:
    return [argv[i + 1] for i, a in enumerate(argv) if a == flag]


def _env(argv: list[str]) -> dict[str, str]:
    return dict(v.partition("=")[::2] for v in _flags(argv, "-e"))


@pytest.fixture
def host(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gpu, "device_nodes", lambda: list(NODES))
    monkeypatch.setattr(gpu, "driver_files", lambda: {"/usr/lib/libcuda.so.580.1": "/usr/local/nvidia/lib64/libcuda.so.1"})
    monkeypatch.setattr(gpu, "host_gpus", lambda: list(HOST))


@pytest.mark.parametrize("gpus,value", [(["1"], "device=1"), (["0", "2"], '"device=0,2"'), (None, "all")])
def test_the_nvidia_runtime_gets_docker_device_syntax(host: None, gpus: list[str] | None, value: str) -> None:
    argv = _argv("docker", "nvidia", gpus)
    assert _flags(argv, "--gpus") == [value], "several GPUs are one quoted CSV field for docker"
    assert "NVIDIA_VISIBLE_DEVICES" not in _env(argv), "--gpus sets it for the runtime"


@pytest.mark.parametrize("kind", ["docker", "podman"])
def test_cdi_gets_one_device_name_per_gpu(host: None, kind: str) -> None:
    assert _flags(_argv(kind, "cdi", ["1", "3"]), "--device") == ["nvidia.com/gpu=1", "nvidia.com/gpu=3"]
    assert _flags(_argv(kind, "cdi", None), "--device") == ["nvidia.com/gpu=all"]


@pytest.mark.parametrize("kind", ["docker", "podman"])
def test_devices_mode_attaches_only_the_selected_nodes_and_every_control_node(host: None, kind: str) -> None:
    argv = _argv(kind, "devices", ["1", "3"])
    assert _flags(argv, "--device") == ["/dev/nvidia1", "/dev/nvidia3", *CONTROL]
    env = _env(argv)
    assert env["CUDA_VISIBLE_DEVICES"] == "0,1", "CUDA inside numbers the two GPUs it has from 0"
    assert env["NVIDIA_VISIBLE_DEVICES"] == "void", "a default nvidia runtime must not add the others"
    assert "/usr/lib/libcuda.so.580.1:/usr/local/nvidia/lib64/libcuda.so.1:ro" in argv


@pytest.mark.parametrize("kind,mode", [("docker", "nvidia"), ("docker", "cdi"), ("docker", "devices"),
                                       ("podman", "cdi"), ("podman", "devices")])
def test_a_selection_numbers_the_containers_gpus_from_zero(host: None, kind: str, mode: str) -> None:
    assert _env(_argv(kind, mode, ["2"]))["CUDA_VISIBLE_DEVICES"] == "0"


@pytest.mark.parametrize("kind,mode", [("docker", "nvidia"), ("docker", "cdi"), ("docker", "devices"),
                                       ("podman", "cdi"), ("podman", "devices")])
def test_without_a_selection_the_command_line_is_todays(host: None, kind: str, mode: str,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2")
    argv = _argv(kind, mode, None)
    assert argv == runner.run_argv("img:1", ["nvidia-smi"], gpu_mode=mode, user=(1, 1), repo=gpu.DRIVER_DIR,
                                       cache=gpu.DRIVER_DIR, engine=fake(kind, IMG))
    env = _env(argv)
    assert "CUDA_VISIBLE_DEVICES" not in env and "NVIDIA_VISIBLE_DEVICES" not in env
    assert "CUDA_VISIBLE_DEVICES" not in argv, "the host's value is never passed by name either"
    if mode == "devices":
        assert _flags(argv, "--device") == NODES


def test_a_selected_gpu_without_its_device_node_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gpu, "device_nodes", lambda: ["/dev/nvidia0", "/dev/nvidiactl"])
    monkeypatch.setattr(gpu, "driver_files", lambda: {})
    with pytest.raises(KernellabError, match=r"no /dev/nvidia1 for the GPUs selected \(1\)"):
        _argv("docker", "devices", ["1"])


def test_an_empty_selection_is_no_gpu_mode_not_all_gpus(host: None) -> None:
    with pytest.raises(ValueError, match="no GPU selected"):
        _argv("docker", "nvidia", [])


# ------------------------------------------------------------------ containers.run and the tasks


@pytest.fixture
def launched(host: None, monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> list[list[str]]:
    """containers.run with a fake docker as the current engine (it has img:1 and kernellab:cpu); each
    command line it would start."""
    for name in ("SLURM_JOB_GPUS", "SLURM_STEP_GPUS", "CUDA_VISIBLE_DEVICES"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("KERNELLAB_CACHE", str(tmp_path))
    monkeypatch.setenv("KERNELLAB_ENGINE", "docker")
    monkeypatch.setitem(engine._instances, "docker", fake("docker", IMG))
    monkeypatch.setattr(runner, "best_gpu_mode", lambda eng=None: "nvidia")
    calls: list[list[str]] = []
    monkeypatch.setattr(proc, "call", lambda argv, **kw: calls.append(list(argv)) or 0)
    return calls


def test_a_slurm_tasks_container_gets_only_the_tasks_gpus(launched: list[list[str]],
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SLURM_JOB_GPUS", "2,3")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    assert runner.run("img:1", ["true"]) == 0
    (argv,) = launched
    assert _flags(argv, "--gpus") == ['"device=2,3"'] and _env(argv)["CUDA_VISIBLE_DEVICES"] == "0,1"


def test_a_cuda_visible_devices_that_hides_all_gpus_starts_a_container_without_any(
        launched: list[list[str]], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    runner.run("img:1", ["true"])
    assert "--gpus" not in launched[0] and "--device" not in launched[0]


def test_gpu_index_and_no_gpu_mode_contradict(launched: list[list[str]]) -> None:
    with pytest.raises(KernellabError, match="--gpu-mode none attaches none"):
        runner.run("img:1", ["true"], gpu=False, gpu_index="1")
    assert not launched


def _ctx() -> Context:
    return Context(Config(overrides={"kernellab": {"target": "cpu"}}))


def test_shell_gpu_index_reaches_the_command_line(launched: list[list[str]],
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    container_tasks.shell.body(_ctx(), cmd="nvidia-smi", gpu_index="3", gpu_mode="devices")
    (argv,) = launched
    assert _flags(argv, "--device") == ["/dev/nvidia3", *CONTROL], "the flag wins over the environment"
    assert argv[-3:] == ["bash", "-c", "nvidia-smi"]


def test_test_and_bench_gpu_index_reach_the_command_line(launched: list[list[str]]) -> None:
    container_tasks.test.body(_ctx(), gpu_index="1", gpu_mode="cdi")
    bench_task.bench.body(_ctx(), gpu_index="2", quick=True)
    test_argv, bench_argv = launched
    assert _flags(test_argv, "--device") == ["nvidia.com/gpu=1"]
    assert _flags(bench_argv, "--gpus") == ["device=2"]
    assert bench_argv[-4:] == ["python", "-m", "kernellab.bench", "--quick"]


def test_a_bad_gpu_index_stops_the_task_before_any_container(launched: list[list[str]]) -> None:
    with pytest.raises(Exit, match="--gpu-index 9 names GPU '9'") as e:
        container_tasks.shell.body(_ctx(), cmd="true", gpu_index="9")
    assert e.value.code != 0 and not launched


@pytest.mark.parametrize("task", ["test", "bench"])
def test_a_native_run_shows_the_child_only_the_chosen_gpu(host: None, monkeypatch: pytest.MonkeyPatch,
                                                          task: str) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1,2,3")
    seen: list[dict[str, Any]] = []
    monkeypatch.setattr(proc, "call", lambda argv, **kw: seen.append(kw) or 0)
    body = container_tasks.test.body if task == "test" else bench_task.bench.body
    body(_ctx(), native=True, gpu_index="1")
    assert seen[0]["env"]["CUDA_VISIBLE_DEVICES"] == HOST[1].uuid
    body(_ctx(), native=True)
    assert "CUDA_VISIBLE_DEVICES" not in seen[1]["env"], "without the flag the child inherits this environment's"


# ------------------------------------------------------------------ what the bench records


def test_the_bench_stamps_and_locks_the_gpu_torch_uses_found_by_uuid(monkeypatch: pytest.MonkeyPatch) -> None:
    torch = pytest.importorskip("torch", reason="torch is not installed (pip install torch)")
    from kernellab.bench import clocks, environment, runner

    # In a container given /dev/nvidia2 only, torch's device 0 is the host's GPU 2: NVML's GPU 0
    # (or nvidia-smi's first line) would be another GPU; the UUID is the only safe link.
    props = SimpleNamespace(name="NVIDIA H100 80GB HBM3", uuid=HOST[2].uuid[4:], major=9, minor=0,
                            multi_processor_count=132, L2_cache_size=50 << 20, total_memory=80 << 30)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda index: props)
    monkeypatch.setattr(environment, "collect", lambda gpu, **kw: {"host": "h", "gpu": gpu})
    opened: list[str] = []

    class Probe:
        source = "nvml"

        def facts(self) -> dict[str, Any]:
            return {"source": "nvml", "driver": "580.1", "max_sm_mhz": 1980, "minor_number": 2}

    monkeypatch.setattr(clocks, "open_probe", lambda uuid: (opened.append(uuid) or Probe(), ""))
    env, _ = runner.describe(torch)
    assert opened == [props.uuid], "the clock reader is opened by torch's UUID, never by index"
    stamp = env["gpu"]
    assert stamp["uuid"] == props.uuid and stamp["index"] == 2 and stamp["torch_index"] == 0
    assert "minor_number" not in stamp["clocks"] and stamp["driver"] == "580.1"


def test_nvidia_smis_report_gives_the_minor_number() -> None:
    from kernellab.bench import clocks

    report = "GPU 00000000:00:06.0\n    Product Name : NVIDIA H100\n    Minor Number                 : 3\n"
    assert clocks.minor_number(report) == 3
    assert clocks.minor_number("    Minor Number : N/A\n") is None
