"""Arch-specific code (sm_90a, sm_100a, sm_120f, ...): matrix.toml's [arch_specific], op.toml's `requires`,
the arch list an op's library is built for, and why a candidate cannot run on a build or a GPU. The GPU
test runs the fixture in tests/archspecific/ on the GPU machine; tests/test_debian_docker.py builds it
with CUDA 12.4 in CI."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from kernellab.errors import ConfigError
from kernellab.image import targets
from kernellab.ops import extensions
from kernellab.ops.spec import parse_spec

FIXTURES = Path(__file__).parent / "archspecific"


def test_the_matrix_names_each_variant_with_the_oldest_cuda_that_builds_it() -> None:
    arch = targets.load().arch_specific
    assert arch["9.0a"] == "12.0" and arch["10.0a"] == "12.8" and arch["12.0f"] == "12.9"
    assert all(v[-1] in "af" for v in arch)


def test_a_required_variant_replaces_its_plain_arch_in_the_list() -> None:
    assert extensions.with_arch_specific("8.0;9.0+PTX", ["9.0a"]) == "8.0;9.0a+PTX"
    assert extensions.with_arch_specific("8.0 9.0", ["9.0a", "10.0a"]) == "8.0;9.0a"
    assert extensions.with_arch_specific("8.0;9.0", []) == "8.0;9.0"


def test_the_plain_arch_list_forgets_what_an_earlier_build_asked_for(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TORCH_CUDA_ARCH_LIST", "8.0;9.0a+PTX;10.0f")
    assert extensions.plain_arch_list() == "8.0;9.0+PTX;10.0"


def op_with(tmp_path: Path, requires: str) -> Path:
    folder = tmp_path / "fence"
    shutil.copytree(FIXTURES / "sm90a_fence", folder)
    toml = (folder / "op.toml").read_text().replace('requires = { kernellab = "sm_90a" }', requires)
    (folder / "op.toml").write_text(toml)
    return folder / "op.toml"


def test_requires_is_read_as_a_variant_per_candidate() -> None:
    assert parse_spec(FIXTURES / "sm90a_fence" / "op.toml").requires == {"kernellab": "9.0a"}


@pytest.mark.parametrize("line, words", [
    ('requires = { wgmma = "sm_90a" }', "requires names 'wgmma', which is not a candidate (kernellab)"),
    ('requires = { kernellab = "sm_90" }', "can require one of sm_90a, sm_100a"),
    ('requires = { kernellab = "sm_91a" }', "can require one of"),
    ('requires = "sm_90a"', "requires must be a table"),
])
def test_bad_requires_is_one_sentence(tmp_path: Path, line: str, words: str) -> None:
    with pytest.raises(ConfigError, match=words.replace("(", r"\(").replace(")", r"\)")):
        parse_spec(op_with(tmp_path, line))


@pytest.fixture
def torch_facts(monkeypatch: pytest.MonkeyPatch):
    torch = pytest.importorskip("torch")

    def set_facts(cuda: str | None, arch_list: str, capability: tuple[int, int] | None) -> None:
        monkeypatch.setattr(torch.version, "cuda", cuda)
        monkeypatch.setenv("TORCH_CUDA_ARCH_LIST", arch_list)
        monkeypatch.setattr(torch.cuda, "is_available", lambda: capability is not None)
        monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a: capability)
    return set_facts


def test_a_candidate_runs_only_where_its_code_is_built_and_its_gpu_is(torch_facts) -> None:
    from kernellab.ops import library

    spec = parse_spec(FIXTURES / "sm90a_fence" / "op.toml")
    torch_facts("12.4", "8.0;9.0", (9, 0))
    assert library.arch_requirements(spec) == (["9.0a"], {})
    torch_facts("12.4", "8.0;9.0", (8, 0))  # an A100 with an image built for both
    variants, reasons = library.arch_requirements(spec)
    assert variants == ["9.0a"]
    assert reasons["kernellab"] == "kernellab needs a GPU of compute capability 9.0 for its sm_90a code; this GPU is 8.0"
    torch_facts("12.4", "8.0", (8, 0))  # an image for A100 only
    assert library.arch_requirements(spec) == ([], {"kernellab": "kernellab needs sm_90a code, but this build's arch list "
                                                               "(8.0) has no 9.0: use a target for GPUs of compute "
                                                               "capability 9.0"})
    torch_facts("11.8", "8.0;9.0", (9, 0))
    assert library.arch_requirements(spec) == ([], {"kernellab": "kernellab needs sm_90a code, which CUDA 12.0 or newer "
                                                               "builds; this is CUDA 11.8"})
    torch_facts("12.4", "8.0;9.0a", None)  # no GPU (an image build): the build still gets sm_90a
    assert library.arch_requirements(spec, gpu=False) == (["9.0a"], {})


@pytest.mark.gpu
@pytest.mark.slow
def test_the_sm90a_candidate_runs_its_sm90a_code_on_the_gpu() -> None:
    import torch

    from kernellab.ops import binaries, checks, library

    spec = parse_spec(FIXTURES / "sm90a_fence" / "op.toml")
    module = library.load(spec)
    if module.unavailable:
        pytest.skip(module.unavailable["kernellab"])  # not an H100/H200: the reason, as the tests say it
    assert module.build is not None
    cubins = binaries.fingerprint(module.build.device_code).cubins
    assert "sm_90a" in cubins and "sm_90" not in cubins, cubins
    assert torch.cuda.get_device_capability() == (9, 0)
    for label, shape, dtype, seed in checks.cases(spec):
        # x + 1 comes out only of the sm_90a code: this proves the GPU ran it.
        assert checks.match_reference(spec, module, label, shape, dtype, seed) is None
