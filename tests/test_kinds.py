"""Target kinds behind a registry, the typed Target record, and the one owner of the PyTorch index."""
from __future__ import annotations

import io
import shutil
from pathlib import Path

import pytest

from fake_engine import fake, image
from kernellab.cli import images as image_tasks
from kernellab.errors import ConfigError, ResolveError
from kernellab.image import builder, kinds, network, render, targets
from kernellab.image.kinds import Kind, Request, choose, debootstrap_cpu, torch_index
from kernellab.image.resolve import resolve
from kernellab.image.spec import BaseFacts, Spec
from kernellab.image.target_table import Target
from kernellab.image.targets import Matrix

ROOT = Path(__file__).resolve().parents[1]
M = targets.load()
SITE = BaseFacts(python="3.12.3", torch="2.11.0+cu130", torch_cuda="13.0")


# --------------------------------------------------------------------------- the registry

def test_the_registry_lists_the_five_kinds_in_claim_order_each_with_its_template():
    assert kinds.names() == ["base-image", "cpu", "cuda-pip", "cuda-debian", "cuda-image"]
    for kind in kinds.REGISTRY.values():
        assert (kind.template_dir / kind.template).is_file(), f"{kind.name} has no template {kind.template}"
        assert kinds.get(kind.name) is kind


EXPECTED_KINDS = {
    "cpu": "cpu", "cu130-pip": "cuda-pip", "cu121-a100": "cuda-image", "cu124-h100": "cuda-image",
    "cu128-blackwell": "cuda-image", "tvm07-paper": "cuda-image", "gpuhost": "base-image",
    "cu124-debian": "cuda-debian", "cu118-debian": "cuda-debian", "cu112-debian11": "cuda-debian",
    "cpu-debian11": "cpu",
}


def test_every_named_target_resolves_to_its_expected_kind():
    assert set(M.targets) == set(EXPECTED_KINDS), "a target was added or removed: name its kind here"
    for name, t in M.targets.items():
        spec = resolve(M, target=name, base_facts=SITE if kinds.probes(t.base) else None)
        assert spec.kind == EXPECTED_KINDS[name], name
        assert spec.kind in kinds.REGISTRY


def test_an_unknown_kind_name_is_refused_with_the_closest():
    with pytest.raises(Exception, match="did you mean cuda-pip"):
        kinds.get("cuda-pipp")


def test_debootstrap_references_are_parsed_by_the_cpu_kind_alone():
    assert debootstrap_cpu.suite("debootstrap:trixie") == "trixie" and debootstrap_cpu.suite("ubuntu:22.04") is None
    assert not kinds.probes("debootstrap:bookworm") and kinds.probes("site:gpu") and not kinds.probes(None)
    spec = resolve(M, target="cpu")
    assert kinds.get(spec.kind).from_ref(spec) == "kernellab-base:debian-bookworm"
    pip = resolve(M, target="cu130-pip")
    assert kinds.get(pip.kind).from_ref(pip) == "kernellab-base:debian-bookworm", "cuda-pip shares the OS base"


def test_a_kind_makes_or_finds_its_base_through_the_engine_it_is_given(monkeypatch):
    spec = resolve(M, target="cpu")
    have = fake("docker", {"kernellab-base:debian-bookworm": image("sha256:base")})
    assert builder.ensure_base(spec, engine=have, out=io.StringIO()) == ("kernellab-base:debian-bookworm", "sha256:base")
    assert kinds.get("cpu").base_status(spec, have).severity == "ok"
    monkeypatch.setattr(debootstrap_cpu.shutil, "which", lambda name: None)
    status = kinds.get("cpu").base_status(spec, fake("docker", {}))
    assert status.severity == "fail" and "mmdebstrap is not installed" in status.message
    cuda = resolve(M, target="cu121-a100")
    status = kinds.get(cuda.kind).base_status(cuda, fake("docker", {}))
    assert status.severity == "warn" and "will try to pull it" in status.message and "import-image" in status.remedy


class FakeKind(Kind):
    """A sixth kind that exists only in this test: a module, a registry line and a template, nothing else."""

    name = "cuda-fake"
    toolkit = "fake"
    toolkit_help = "a test kind"

    def claims(self, req: Request) -> bool:
        return req.gpus is not None and req.toolkit == "fake"

    def resolve(self, matrix: Matrix, req: Request) -> Spec:
        gpus = req.gpus or ()
        cuda = choose.cuda_for(matrix, req.cuda, gpus)
        return Spec(kind=self.name, target=req.target, gpus=tuple(g.key for g in gpus), ccs=choose.ccs(gpus),
                    cuda=cuda.version, cuda_full=cuda.full, cudnn=None, min_driver=cuda.min_driver, torch=None,
                    torch_variant="preinstalled", python="3.12", os=None, base="fake/cuda:" + cuda.full, gcc=None,
                    llvm=None, triton=None, pip_toolkit=None, cuda_home="/opt/fake", **req.extras(matrix))

    def tag_parts(self, spec: Spec) -> list[str]:
        return ["fake", "cu" + (spec.cuda or "").replace(".", "")]


def test_a_sixth_kind_registered_in_a_test_is_picked_up_by_resolve_and_render(tmp_path, monkeypatch):
    (tmp_path / "kinds").mkdir()
    (tmp_path / "kinds" / "cuda-fake.j2").write_text(
        '{% extends "Dockerfile.j2" %}\n{% block kind %}\n\n# the fake kind for {{ spec.gpus | join(",") }}'
        '\nENV CUDA_HOME={{ spec.cuda_home }}{% endblock %}\n')
    kind = FakeKind()
    kind.template_dir = tmp_path
    monkeypatch.setitem(kinds.REGISTRY, kind.name, kind)
    spec = resolve(M, gpu="a100,h100", cuda="12.4", toolkit="fake")
    assert spec.kind == "cuda-fake" and spec.tag.startswith("kernellab:fake-cu124-")
    text = render.dockerfile(spec, M)
    assert "FROM fake/cuda:12.4.1" in text and "# the fake kind for a100,h100\nENV CUDA_HOME=/opt/fake" in text
    assert 'TORCH_CUDA_ARCH_LIST="8.0;9.0+PTX"' in text and 'kernellab.kind="cuda-fake"' in text
    with pytest.raises(ResolveError, match=r"use debian .* or fake \(a test kind\) or image .* or pip"):
        resolve(M, gpu="a100", toolkit="nope")
    monkeypatch.undo()
    assert "cuda-fake" not in kinds.REGISTRY
    assert resolve(M, gpu="a100", cuda="12.4").kind == "cuda-image"


# --------------------------------------------------------------------------- the typed Target

def test_targets_are_typed_records():
    t = M.targets["tvm07-paper"]
    assert isinstance(t, Target) and t.name == "tvm07-paper"
    assert (t.cuda, t.gpu, t.llvm, t.rendered, t.default_for) == ("11.8", ("a10", "a100"), "10", True, None)
    assert "scipy<1.11" in t.pip and M.targets["cpu"].default_for == "cpu"
    with pytest.raises(AttributeError):
        t.cuda = "12.1"  # type: ignore[misc]


@pytest.mark.parametrize("table,expect", [
    ('cuda_version = "12.1"', "unknown keys ['cuda_version']; known keys: ['apt', 'as_of', 'base', "),
    ('as_of = "last spring"', "`as_of` must be a day such as as_of = 2021-06-17 (the paper's time"),
    ("python = 3.10", "`python` must be a string such as python = \"3.11\", not float 3.1 (quote versions"),
    ("gpu = [80]", "`gpu` must be a list of strings such as gpu = [\"a100\"], not list [80]"),
    ('gcc = "twelve"', "`gcc` must be a major version such as gcc = 12, not str 'twelve'"),
    ('default_for = "laptop"', "`default_for` must be \"cpu\" or \"gpu\", not str 'laptop'"),
    ('rendered = "yes"', "`rendered` must be true or false, not str 'yes'"),
])
def test_a_malformed_target_is_refused_with_one_sentence(tmp_path, table, expect):
    shutil.copy(ROOT / "docker" / "matrix.toml", tmp_path / "matrix.toml")
    shutil.copy(ROOT / "docker" / "wheels.toml", tmp_path / "wheels.toml")
    gpu = "" if table.startswith("gpu") else 'gpu = ["a100"]\n'
    (tmp_path / "targets.toml").write_text(f"[target.bad]\n{gpu}{table}\n")
    with pytest.raises(ConfigError) as e:
        targets.load(tmp_path)
    msg = str(e.value)
    assert msg.startswith("target `bad` in targets.toml") and expect in msg
    assert "\n" not in msg and msg.endswith(".") and msg.count(". ") == 0, "one sentence"


def test_loose_but_unambiguous_target_values_are_accepted(tmp_path):
    shutil.copy(ROOT / "docker" / "matrix.toml", tmp_path / "matrix.toml")
    shutil.copy(ROOT / "docker" / "wheels.toml", tmp_path / "wheels.toml")
    (tmp_path / "targets.toml").write_text('[target.t]\ngpu = "a100"\nllvm = 15\ngcc = "11"\ncuda = "12.1"\n')
    t = targets.load(tmp_path).targets["t"]
    assert (t.gpu, t.llvm, t.gcc) == (("a100",), "15", 11)


# --------------------------------------------------------------------------- the PyTorch index: one owner

class Probe:
    """A fake reachability probe: records the hosts asked about, answers as told."""

    def __init__(self, up: bool):
        self.up, self.hosts = up, []

    def __call__(self, host: str) -> bool:
        self.hosts.append(host)
        return self.up


class Stop(Exception):
    pass


def _index_the_build_uses(spec: Spec, monkeypatch) -> str | None:
    """Run images.build up to rendering (fake engine, no Docker) and return the index it renders with."""
    seen: list[Spec] = []

    def capture(spec: Spec, *a, **kw):
        seen.append(spec)
        raise Stop

    monkeypatch.setattr(render, "write_context", capture)
    monkeypatch.setattr(network, "host_pip_config", lambda: network.PipConfig({}))
    engine = fake("docker", {"kernellab-base:debian-bookworm": image("sha256:base")})
    with pytest.raises(Stop):
        builder.build(spec, engine=engine, out=io.StringIO())
    return seen[0].torch_index


ENVIRONMENTS = [  # (KERNELLAB_TORCH_INDEX, HTTPS_PROXY, index host answers) -> the index the build uses
    (None, None, True, "https://download.pytorch.org/whl/cpu"),
    (None, None, False, None),                                     # `make test` by hand here
    (None, "http://proxy:3128", False, "https://download.pytorch.org/whl/cpu"),
    ("", None, True, None),                                        # CI: `export KERNELLAB_TORCH_INDEX=`
    ("https://mirror.corp/{variant}", None, False, "https://mirror.corp/cpu"),
]


@pytest.mark.parametrize("env,proxy,up,expect", ENVIRONMENTS)
def test_tests_and_tasks_pick_the_same_torch_index(monkeypatch, env, proxy, up, expect):
    from test_images_docker import cpu_spec  # the Docker tests' helper: it must resolve as the tasks do

    for var in (torch_index.ENV, *torch_index.HTTPS_PROXY_VARS):
        monkeypatch.delenv(var, raising=False)
    if env is not None:
        monkeypatch.setenv(torch_index.ENV, env)
    if proxy:
        monkeypatch.setenv("HTTPS_PROXY", proxy)
    probe = Probe(up)
    monkeypatch.setattr(torch_index, "reachable", probe)
    by_tests = cpu_spec()
    by_task = image_tasks._spec("cpu", None, None, None, None, None, None, None, None, None)
    assert by_tests == by_task and by_tests.torch_index == by_task.torch_index
    assert _index_the_build_uses(by_tests, monkeypatch) == _index_the_build_uses(by_task, monkeypatch) == expect
    assert set(probe.hosts) <= {"download.pytorch.org"}, "only the fake probe is asked"
    if env is not None or proxy:
        assert probe.hosts == [], "KERNELLAB_TORCH_INDEX or a proxy: nothing is probed"


def test_the_index_rule_lives_in_one_function(monkeypatch):
    for var in (torch_index.ENV, "HTTPS_PROXY", "https_proxy", "ALL_PROXY"):
        monkeypatch.delenv(var, raising=False)  # CI sets KERNELLAB_TORCH_INDEX=; this test sets its own
    monkeypatch.setattr(torch_index, "reachable", Probe(False))
    none: dict[str, str] = {}
    assert torch_index.choose_index(M, environ=none) == (M.torch_index, ""), "resolving never probes"
    index, note = torch_index.choose_index(M, probe=True, environ=none)
    assert index == "" and "download.pytorch.org is unreachable" in note
    assert torch_index.choose_index(M, probe=True, environ={"ALL_PROXY": "socks5://p"}) == (M.torch_index, "")
    assert torch_index.choose_index(M, probe=True, environ={torch_index.ENV: ""}) == ("", "")
    assert builder.torch_index_for_builds(M) == (index, note), "the build asks the same function"


def test_resolving_and_dry_runs_never_probe_the_network(monkeypatch):
    def no_network(host: str) -> bool:
        raise AssertionError(f"probed {host} while only resolving")

    monkeypatch.setattr(torch_index, "reachable", no_network)
    monkeypatch.delenv(torch_index.ENV, raising=False)
    spec = builder.resolve_request(target="cpu")
    assert spec.torch_index == "https://download.pytorch.org/whl/cpu"
    assert "--extra-index-url https://download.pytorch.org/whl/cpu" in render.dockerfile(spec, M)
