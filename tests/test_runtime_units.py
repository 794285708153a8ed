"""Unit tests for container argument building, the build's network inputs and doctor's logic.

Docker is not needed: these check the command lines and decisions; the docker-marked tests
prove they work against a real engine.
"""
from __future__ import annotations

import urllib.request

import pytest

from fake_engine import fake, image
from kernellab import doctor, gpu
from kernellab.container import runner
from kernellab.errors import KernellabError
from kernellab.image import builder, compat, network

IMG = {"img:1": image("sha256:feed", env=["PATH=/opt/venv/bin:/usr/bin", "LD_LIBRARY_PATH=/usr/local/cuda/lib64"])}


@pytest.fixture
def fake_image():
    return fake("docker", IMG)


def test_run_argv_mounts_repo_and_cache_runs_as_the_caller_and_is_not_privileged(fake_image, tmp_path):
    argv = runner.run_argv("img:1", ["pytest", "-q"], user=(1234, 567), repo=tmp_path, cache=tmp_path / "c",
                               engine=fake_image)
    assert argv[:2] == ["docker", "run"] and argv[-3:] == ["img:1", "pytest", "-q"]
    assert "--privileged" not in argv and "--rm" in argv
    assert argv[argv.index("--user") + 1] == "1234:567"
    assert f"{tmp_path}:/workspace" in argv and f"{tmp_path / 'c'}:/cache" in argv
    env = dict(argv[i + 1].partition("=")[::2] for i, a in enumerate(argv) if a == "-e")
    assert env["HOME"] == "/cache/home" and env["KERNELLAB_CACHE"] == "/cache" and env["KERNELLAB_IMAGE_ID"] == "sha256:feed"


def test_kernellab_switches_reach_the_container_by_name_only(fake_image, tmp_path, monkeypatch):
    monkeypatch.setenv("KERNELLAB_OPS", "softmax")
    monkeypatch.setenv("KERNELLAB_TORCH_INDEX", "https://u:secret@mirror/{variant}")
    argv = runner.run_argv("img:1", [], user=(1, 1), repo=tmp_path, cache=tmp_path, engine=fake_image)
    assert "KERNELLAB_OPS" in argv and "KERNELLAB_TORCH_INDEX" in argv
    assert not any("secret" in a for a in argv), "values are read by docker from the environment, not argv"


def test_devices_mode_passes_nodes_and_driver_libraries_and_extends_paths(fake_image, monkeypatch, tmp_path):
    monkeypatch.setattr(gpu, "device_nodes", lambda: ["/dev/nvidia0", "/dev/nvidiactl", "/dev/nvidia-uvm"])
    monkeypatch.setattr(gpu, "driver_files", lambda: {"/usr/lib/x86_64-linux-gnu/libcuda.so.580.1":
                                                      "/usr/local/nvidia/lib64/libcuda.so.1"})
    argv = runner.run_argv("img:1", ["nvidia-smi"], gpu_mode="devices", user=(1, 1), repo=tmp_path,
                               cache=tmp_path, engine=fake_image)
    devices = [argv[i + 1] for i, a in enumerate(argv) if a == "--device"]
    assert devices == ["/dev/nvidia0", "/dev/nvidiactl", "/dev/nvidia-uvm"]
    assert "/usr/lib/x86_64-linux-gnu/libcuda.so.580.1:/usr/local/nvidia/lib64/libcuda.so.1:ro" in argv
    assert "LD_LIBRARY_PATH=/usr/local/cuda/lib64:/usr/local/nvidia/lib64:/usr/local/nvidia/lib" in argv
    assert "PATH=/opt/venv/bin:/usr/bin:/usr/local/nvidia/bin" in argv
    assert "--gpus" not in argv


@pytest.mark.parametrize("mode,flag", [("nvidia", ["--gpus", "all"]), ("cdi", ["--device", "nvidia.com/gpu=all"])])
def test_runtime_and_cdi_modes(mode, flag, fake_image, tmp_path):
    argv = runner.run_argv("img:1", [], gpu_mode=mode, user=(1, 1), repo=tmp_path, cache=tmp_path,
                               engine=fake_image)
    assert argv[argv.index(flag[0]) + 1] == flag[1]


def test_unknown_gpu_mode_is_refused(fake_image):
    with pytest.raises(ValueError, match="unknown GPU mode"):
        gpu.container_gpu_args(fake_image, "magic")


def test_podman_has_no_gpus_flag_and_says_which_modes_it_has(tmp_path):
    with pytest.raises(KernellabError, match="cannot attach GPUs in mode `nvidia`; use one of cdi, devices"):
        runner.run_argv("img:1", [], gpu_mode="nvidia", user=(1, 1), repo=tmp_path, cache=tmp_path,
                            engine=fake("podman", IMG))
    argv = runner.run_argv("img:1", [], gpu_mode="cdi", user=(1, 1), repo=tmp_path, cache=tmp_path,
                               engine=fake("podman", IMG))
    assert argv[0] == "podman" and argv[argv.index("--device") + 1] == "nvidia.com/gpu=all"


def test_rootless_podman_keeps_the_callers_uid_and_uses_host_networking(tmp_path, monkeypatch):
    monkeypatch.setattr("os.geteuid", lambda: 1000)
    argv = runner.run_argv("img:1", ["id"], user=(1000, 1000), repo=tmp_path, cache=tmp_path,
                               engine=fake("podman", IMG))
    assert "--userns=keep-id" in argv and argv[argv.index("--user") + 1] == "1000:1000"
    assert argv[argv.index("--network") + 1] == "host", "rootless slirp4netns needs /dev/net/tun"
    none = runner.run_argv("img:1", ["id"], user=(1000, 1000), repo=tmp_path, cache=tmp_path, network="none",
                               engine=fake("podman", IMG))
    assert none[none.index("--network") + 1] == "none"


@pytest.mark.parametrize("kind", ["docker", "podman"])
def test_build_argv_passes_the_secret_and_never_a_privileged_flag(kind, tmp_path):
    argv, env = fake(kind).build_argv(tmp_path, iidfile=tmp_path / "iid", tags=("a:1",), secrets={"pipconf": tmp_path / "p"})
    assert argv[-1] == str(tmp_path) and f"id=pipconf,src={tmp_path / 'p'}" in argv
    assert argv[argv.index("-t") + 1] == "a:1" and argv[argv.index("--iidfile") + 1] == str(tmp_path / "iid")
    assert "--privileged" not in argv and argv[argv.index("--network") + 1] == "host"
    assert env == ({"DOCKER_BUILDKIT": "1"} if kind == "docker" else {})
    assert "--target" not in argv
    staged, _ = fake(kind).build_argv(tmp_path, iidfile=tmp_path / "iid", target="step-1")
    assert staged[staged.index("--target") + 1] == "step-1" and staged[-1] == str(tmp_path)


def test_podman_ids_read_like_dockers():
    eng = fake("podman", {"x:1": {"Id": "abc123", "Config": {}}})
    assert eng.image_id("x:1") == "sha256:abc123"


def test_a_missing_image_is_one_sentence_naming_the_engine():
    with pytest.raises(KernellabError, match=r"^the podman engine has no image x:2; build it"):
        fake("podman", {}).image_id("x:2")


def test_engine_choice_follows_the_variable_and_refuses_unknown_names(monkeypatch):
    from kernellab import engine
    monkeypatch.setenv("KERNELLAB_ENGINE", "podman")
    assert engine.current().name == "podman"
    with pytest.raises(KernellabError, match="unknown engine `dokcer`; use one of docker, podman"):
        engine.select("dokcer")


def test_caller_ids_follow_sudo(monkeypatch):
    monkeypatch.setenv("SUDO_UID", "1001")
    monkeypatch.setenv("SUDO_GID", "1002")
    assert runner.caller_ids() == (1001, 1002)


def test_local_pip_sources_are_served_and_credentials_stay_in_the_secret(tmp_path):
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    (wheels / "demo-1.0-py3-none-any.whl").write_bytes(b"PK fake")
    index = tmp_path / "mirror" / "simple"
    (index / "demo").mkdir(parents=True)
    (index / "demo" / "index.html").write_text('<a href="../../files/demo-1.0.tar.gz">demo</a>')
    cfg = network.PipConfig({"index-url": ["https://user:tok@pypi.corp/simple"],
                             "extra-index-url": [f"file://{index}"], "find-links": [str(wheels)]})
    with network.build_pip_conf(cfg) as conf:
        text = conf.read_text()
        assert oct(conf.stat().st_mode & 0o777) == "0o600"
        assert "index-url = https://user:tok@pypi.corp/simple" in text
        served = [line.split("=", 1)[1].strip() for line in text.splitlines() if line.startswith(("extra-index-url", "find-links"))]
        listing = urllib.request.urlopen(served[1]).read().decode()
        assert "demo-1.0-py3-none-any.whl" in listing
        assert b"../../files/demo" in urllib.request.urlopen(served[0] + "demo/").read()
        with pytest.raises(urllib.error.HTTPError):
            urllib.request.urlopen(served[1] + "../../../etc/passwd")
    assert not conf.exists(), "the pip.conf is removed after the build"


def test_wheelhouse_means_offline(tmp_path):
    with network.build_pip_conf(network.PipConfig({"index-url": ["https://pypi.org/simple"]}), wheelhouse=tmp_path) as conf:
        text = conf.read_text()
    assert "no-index = true" in text and "pypi.org" not in text
    with pytest.raises(KernellabError, match="not a folder"):
        with network.build_pip_conf(network.PipConfig(), wheelhouse=tmp_path / "missing"):
            pass


def test_proxy_values_go_through_the_environment_never_the_command_line():
    args, env = network.proxy_build_args({"HTTPS_PROXY": "http://u:secret@proxy:3128", "no_proxy": "corp"})
    assert "secret" not in " ".join(args)
    assert args.count("--build-arg") == len(args) // 2 and "HTTPS_PROXY" in args
    assert env["HTTPS_PROXY"] == "http://u:secret@proxy:3128"
    assert env["no_proxy"] == "corp,127.0.0.1,localhost"
    assert network.proxy_build_args({}) == ([], {})


def test_ca_certificates_must_be_pem(tmp_path):
    bad = tmp_path / "x.crt"
    bad.write_text("not a cert")
    with pytest.raises(KernellabError, match="not a PEM certificate"):
        network.ca_certificates([str(bad)], host=False)
    with pytest.raises(KernellabError, match="does not exist"):
        network.ca_certificates([str(tmp_path / "none.crt")], host=False)


@pytest.mark.parametrize("driver,severity", [("580.159.04", "ok"), ("570.10", "warn"), ("470.1", "fail")])
def test_driver_check_against_cuda_13(driver, severity):
    assert compat.driver_finding(driver, "13.0", "580.95.05", "525.60.13").severity == severity


@pytest.mark.parametrize("ccs,arch_list,severity", [
    (["9.0"], "8.0;9.0+PTX", "ok"), (["8.9"], "8.0;8.6+PTX", "ok"), (["8.6"], "8.0+PTX", "ok"),
    (["7.0"], "8.0;9.0+PTX", "fail"), (["9.0", "10.0"], "8.0;9.0", "fail"),
])
def test_arch_coverage(ccs, arch_list, severity):
    assert compat.arch_finding(ccs, arch_list).severity == severity


def test_doctor_checks_are_ordered_and_each_has_a_name():
    names = [name for name, _ in doctor.CHECKS]
    assert names[:3] == ["engines", "engine", "builds"] and "gpu in containers" in names
    assert len(names) == len(set(names))


def test_unreachable_torch_index_is_dropped_with_a_note(monkeypatch):
    from kernellab.image import targets
    monkeypatch.delenv("KERNELLAB_TORCH_INDEX", raising=False)
    for v in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY"):
        monkeypatch.delenv(v, raising=False)
    m = targets.load()
    m = __import__("dataclasses").replace(m, torch_index="https://kernellab-unreachable.invalid/{variant}")
    index, note = builder.torch_index_for_builds(m)
    assert index == "" and "unreachable" in note
    monkeypatch.setenv("KERNELLAB_TORCH_INDEX", "https://mirror/{variant}")
    assert builder.torch_index_for_builds(m) == ("https://mirror/{variant}", "")


def test_trusted_hosts_are_one_line_with_the_local_server(tmp_path):
    cfg = network.PipConfig({"trusted-host": ["pypi.corp"], "find-links": [str(tmp_path)]})
    with network.build_pip_conf(cfg) as conf:
        lines = [ln for ln in conf.read_text().splitlines() if ln.startswith("trusted-host")]
    assert lines == ["trusted-host = pypi.corp 127.0.0.1"]


def test_multi_line_pip_values_are_split_into_urls(monkeypatch):
    from kernellab import proc
    listing = "global.extra-index-url='\\nhttps://a.corp/simple\\nhttps://b.corp/simple'\nglobal.timeout='60'\n"
    monkeypatch.setattr(network.proc, "run", lambda *a, **k: proc.Result(list(a[0]), 0, listing, ""))
    values = network.host_pip_config().values
    assert values["extra-index-url"] == ["https://a.corp/simple", "https://b.corp/simple"]
    assert values["timeout"] == ["60"]


def test_a_private_torch_index_never_reaches_the_dockerfile():
    from kernellab.image import render, targets
    from kernellab.image.resolve import resolve
    m = targets.load()
    private = resolve(m, target="cpu", torch_index="https://u:tok@mirror.corp/{variant}")
    assert "mirror.corp" not in render.dockerfile(private, m)
    public = resolve(m, target="cpu")
    assert "--extra-index-url https://download.pytorch.org/whl/cpu" in render.dockerfile(public, m)


def test_a_missing_podman_is_one_sentence_naming_the_remedy():
    from kernellab import engine
    podman = engine.Podman(cli="kernellab-no-such-podman")
    assert not podman.answers()
    with pytest.raises(KernellabError, match=r"^podman is not installed; `sudo apt-get install podman uidmap catatonit`"):
        podman.require()


def test_doctor_lists_only_the_engines_that_answer(monkeypatch):
    from kernellab import engine
    monkeypatch.setattr(engine, "answering", lambda: [fake("podman")])
    ctx = doctor.Context()
    finding = dict(doctor.CHECKS)["engines"](ctx)
    assert finding.severity == "ok" and finding.message == "answering: podman" and ctx.engines == ["podman"]
    monkeypatch.setattr(engine, "answering", lambda: [])
    assert dict(doctor.CHECKS)["engines"](doctor.Context()).severity == "fail"


@pytest.mark.parametrize("kind", ["docker", "podman"])
def test_a_probe_container_reads_an_image_with_no_network_and_no_init(kind):
    """Engine.probe_argv: the one command line for reading a fact out of an image (its lock, its packages)."""
    argv = fake(kind).probe_argv("img:1", ["/etc/kernellab/recipe-manifest.json"], entrypoint="cat", mounts=("/a:/b:ro",))
    assert argv[argv.index("--network") + 1] == "none" and "--init" not in argv and "--rm" in argv
    assert argv[argv.index("--entrypoint") + 1] == "cat" and argv[-2:] == ["img:1", "/etc/kernellab/recipe-manifest.json"]
    assert "/a:/b:ro" in " ".join(argv) and not any(a.startswith("--shm-size") for a in argv)
