"""PyTorch's wheels and the GPUs they run on (docker/wheels.toml): an accepted combination's wheel runs on every GPU
named, a refusal's suggested pins resolve and run there, Python ranges and NumPy as PyPI and the wheels have them,
and `make check-matrix` against a stand-in PyPI."""
from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kernellab.errors import ConfigError, ResolveError
from kernellab.image import published, targets
from kernellab.image.compat import covers
from kernellab.image.kinds import choose
from kernellab.image.resolve import resolve
from kernellab.image.spec import Spec

M = targets.load()
GPUS = sorted(k for k in M.gpus if k != "cpu")
CUDAS = sorted(M.cuda, key=targets.vkey)
TORCHES = sorted(M.torch, key=targets.vkey)


def runs_on(spec: Spec, gpus: list[str]) -> bool:
    """Whether the spec's PyTorch wheel carries code (SASS, or PTX it can JIT) for every GPU."""
    if not spec.torch:
        return True
    archs = M.torch[spec.torch].archs[spec.torch_variant]
    return all(covers(archs, M.gpus[g].cc) for g in gpus)


OFFERED = choose.pythons(list(M.os.values()))


@settings(max_examples=150, deadline=None)
@given(gpus=st.lists(st.sampled_from(GPUS), min_size=1, max_size=2, unique=True),
       cuda=st.sampled_from([None, *CUDAS]),
       torch=st.sampled_from([None, "none", *TORCHES, *(f"{t}+{v}" for t in TORCHES for v in M.torch[t].variants
                                                        if v != "cpu")]),
       python=st.sampled_from([None, "3.6", "3.8", "3.10", "3.12", "3.14"]),
       toolkit=st.sampled_from([None, None, "pip", "debian"]), ubuntu=st.sampled_from([None, None, "18.04", "24.04"]))
def test_an_accepted_wheel_runs_on_its_gpus_and_every_suggestion_resolves_and_runs(gpus, cuda, torch, python, toolkit,
                                                                                     ubuntu):
    kw = dict(gpu=gpus, cuda=cuda, torch=torch, python=python, toolkit=toolkit, ubuntu=ubuntu)
    try:
        spec = resolve(M, **kw)
    except ResolveError as e:
        msg = str(e)
        assert len(msg.partition(". ")[0]) < 240, msg      # the source of a fact comes after the pins
        assert "drop a GPU" not in msg and "use --torch none" not in msg, msg
        for python_advised in re.findall(r"use --python (\S+) ", msg):
            assert python_advised in OFFERED, msg          # a Python some OS in the matrix has, and it resolves
            resolve(M, **{**kw, "python": python_advised})
        if not e.pins:
            return
        again = resolve(M, **{**kw, **e.pins})             # the suggestion (toolkit and Ubuntu too), pasted back in
        assert runs_on(again, gpus), (kw, e.pins)
        assert f"--cuda {e.pins['cuda']}" in msg
        return
    assert runs_on(spec, gpus), (kw, spec.torch, spec.torch_variant)


@pytest.mark.parametrize("kw, pins, why", [
    # Blackwell kernels first ship in 2.7's cu128 wheels: 2.5 and 2.6 build, then fail on the GPU.
    (dict(cuda="12.8", gpu="b200", torch="2.5.1"), {"cuda": "12.8", "torch": "2.7.1"}, "carry no kernels for B200"),
    (dict(cuda="12.8", gpu="b200", torch="2.6.0"), {"cuda": "12.8", "torch": "2.7.1"}, "5.0;6.0;7.0;7.5;8.0;8.6;9.0"),
    (dict(gpu="rtx5090", torch="2.6.0"), {"torch": "2.7.1"}, ""),
    # 1.13.1's wheels stop at sm_86 (pytorch#90761): not --cuda 11.8 --torch 1.13.1, as was suggested.
    (dict(cuda="11.7", gpu="h100", torch="1.13.1"), {"cuda": "11.8", "torch": "2.0.1"}, "sm_90 needs CUDA 11.8"),
    # CUDA 12.9's newest PyTorch (2.8.0 cu129) has no sm_60: the nearest CUDA, with a wheel that does.
    # (2.14.1 pinned on CUDA 12.8 or 12.9 takes its cu126 wheel, of the same CUDA major.)
    (dict(cuda="13.0", gpu="p100"), {"cuda": "12.9", "torch": "2.14.1"}, "sm_60 needs CUDA 12.9 or older"),
    (dict(cuda="12.8", gpu="p100"), {"cuda": "12.8", "torch": "2.14.1"}, "carry no kernels for Tesla P100"),
    # The nearest CUDA that resolves (11.0), not the newest.
    (dict(cuda="10.2", gpu="v100"), {"cuda": "11.0"}, "no base image"),
    # V100 left the cu128 wheels in 2.11 (get_arch_list() in pytorch#182250); 2.10's cu128 still has sm_70.
    (dict(cuda="12.8", gpu="v100", torch="2.11.0"), {"cuda": "12.8", "torch": "2.11.0+cu126"}, "sm_70"),
])
def test_the_issues_refusals_name_pins_that_resolve_and_run(kw, pins, why):
    with pytest.raises(ResolveError) as e:
        resolve(M, **kw)
    assert why in str(e.value) and "\n" not in str(e.value)
    assert {k: e.value.pins[k] for k in pins} == pins, e.value.pins
    assert runs_on(resolve(M, gpu=kw["gpu"], **e.value.pins), [kw["gpu"]])


def test_v100_runs_the_cu128_wheels_of_2_8_to_2_10_and_not_of_2_7_or_2_11():
    for torch, runs in (("2.7.1", False), ("2.8.0", True), ("2.9.1", True), ("2.10.0", True), ("2.11.0", False)):
        assert covers(M.torch[torch].archs["cu128"], "7.0") is runs, torch


@pytest.mark.parametrize("torch, python", [("1.13.1", "3.11"), ("2.3.1", "3.12"), ("2.5.1", "3.13"), ("2.15.0", "3.15")])
def test_the_pythons_pypi_has_wheels_for_are_not_refused(torch, python):
    """Release notes called these "experimental" or left them out; PyPI has the wheels (`pip index versions`)."""
    assert M.torch[torch].supports_python(python)
    try:
        resolve(M, gpu="a100", torch=torch, python=python)
    except ResolveError as e:
        assert "supports Python" not in str(e), e


def test_a_pytorch_built_against_numpy_1_gets_numpy_below_2():
    old = resolve(M, cuda="11.6", torch="1.13.0", python="3.9", gpu="a100")
    assert "numpy<2" in old.image_pip and "numpy" not in old.image_pip
    assert "numpy" in resolve(M, cuda="12.1", torch="2.3.1", gpu="a100").image_pip   # 2.3.0: built against NumPy 2
    assert M.torch["2.2.2"].numpy == "<2" and not M.torch["2.3.1"].numpy


def test_the_matrix_knows_torch_2_14_and_2_15():
    assert resolve(M, cuda="13.0", gpu="h100", torch="2.14").torch == "2.14.1"
    assert resolve(M, cuda="13.0", gpu="h100").torch == "2.15.0"
    assert (M.torch["2.15.0"].pypi_default, M.torch["2.14.1"].pypi_default) == ("cu132", "cu130")  # their METADATA


def test_a_variant_without_an_architecture_list_or_a_source_is_refused(tmp_path):
    docker = tmp_path / "docker"
    shutil.copytree(Path(targets.DOCKER_DIR), docker, ignore=shutil.ignore_patterns("rendered", "locks"))
    wheels = docker / "wheels.toml"
    text = wheels.read_text()
    wheels.write_text(text.replace('cu129 = { archs = "7.0;', 'cu129x = { archs = "7.0;'))
    with pytest.raises(ConfigError, match=r'cu129x is not a published variant of torch 2.8.0'):
        targets.load(docker)
    wheels.write_text("\n".join(line for line in text.splitlines() if not line.startswith("cu129 =")) + "\n")
    with pytest.raises(ConfigError, match=r'no architecture list for torch 2.8.0 cu129'):
        targets.load(docker)
    wheels.write_text(re.sub(r'(cu129 = \{ archs = "[^"]*", source = )"[^"]*"', r'\1" "', text))
    with pytest.raises(ConfigError, match=r"every row names its source"):
        targets.load(docker)


# --------------------------------------------------------------------------- make check-matrix

def pypi(table: dict[str, dict[str, list[str]]]):
    """A stand-in for `pip index versions`: package -> python -> versions."""
    return lambda package, python: table.get(package, {}).get(python, [])


def _agreeing() -> dict[str, dict[str, list[str]]]:
    torch: dict[str, list[str]] = {py: [] for py in published.PYTHONS}
    triton: dict[str, list[str]] = {py: [] for py in published.PYTHONS}
    for t in M.torch.values():
        for py in published.PYTHONS:
            if t.supports_python(py):
                torch[py].append(t.version)
                if t.triton:
                    triton[py].append(t.triton)
    return {"torch": torch, "triton": triton}


def test_check_matrix_passes_when_pypi_agrees_and_names_each_difference():
    table = _agreeing()
    assert published.compare(M, pypi(table)) == published.Report((), (), ())
    table["torch"]["3.15"].append("2.13.0")      # 2.13.0 gains a cp315 wheel (and its triton one); a newer release
    table["triton"]["3.15"].append("3.7.1")
    table["torch"]["3.12"].append("2.16.0")
    report = published.compare(M, pypi(table))
    assert report.problems == ("torch 2.13.0: PyPI publishes wheels for Python 3.10–3.15; the matrix says 3.10–3.14 "
                               '(docker/matrix.toml: python = ["3.10", "3.15"])',)
    assert report.news and "torch 2.16.0, newer than the matrix's newest (2.15.0)" in report.news[0]
    # A triton pin PyPI has for only some of the release's Pythons is a note (torch 2.5 requires it only below
    # 3.13); a pin PyPI has for none of them is a difference.
    table = _agreeing()
    table["triton"]["3.13"].remove("3.1.0")
    report = published.compare(M, pypi(table))
    assert not report.problems and "torch 2.5.1's triton 3.1.0 has no wheel for Python 3.13" in report.notes[0]
    table["triton"] = {py: [v for v in vs if v != "3.1.0"] for py, vs in table["triton"].items()}
    assert published.compare(M, pypi(table)).problems == (
        "torch 2.5.1 pins triton 3.1.0, which PyPI has no wheel of for any of its Pythons",)


def test_an_index_that_lists_no_torch_at_all_is_unreachable_not_a_mismatch():
    with pytest.raises(published.Unreachable, match="lists no torch for any Python"):
        published.compare(M, pypi({}))


def test_check_matrix_stops_when_the_index_cannot_be_reached(monkeypatch, capsys):
    def unreachable(package, python):
        raise published.Unreachable("cannot reach the package index (Network is unreachable); run it where PyPI is")

    monkeypatch.setattr(published, "pypi_versions", unreachable)
    monkeypatch.setattr(published.compare, "__defaults__", (unreachable,))
    assert published.main() == 2
    assert "cannot reach the package index" in capsys.readouterr().err
