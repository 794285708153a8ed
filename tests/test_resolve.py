"""Resolution, every refusal the matrix implies, rendering, and drift of the committed Dockerfiles."""
from __future__ import annotations

import dataclasses
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from kernellab.cli.images import write_rendered
from kernellab.errors import ResolveError
from kernellab.image import kinds, render, targets
from kernellab.image.resolve import resolve
from kernellab.image.spec import BaseFacts
from kernellab.image.targets import BaseImage

ROOT = Path(__file__).resolve().parents[1]
M = targets.load()


def refuse(**kw) -> str:
    with pytest.raises(ResolveError) as e:
        resolve(M, **kw)
    msg = str(e.value)
    assert "\n" not in msg, "a refusal is one sentence"
    return msg


# --------------------------------------------------------------------------- defaults

def test_cuda121_a100_gets_newest_compatible_everything():
    s = resolve(M, cuda="12.1", gpu="a100")
    assert (s.kind, s.cuda_full, s.torch, s.torch_variant) == ("cuda-image", "12.1.1", "2.5.1", "cu121")
    assert s.base == "nvidia/cuda:12.1.1-cudnn8-devel-ubuntu22.04" and s.cudnn == "8.9.0.131"
    assert s.gcc <= M.cuda["12.1"].max_gcc
    assert s.arch_list == "8.0+PTX"
    assert s.gencode == "-gencode=arch=compute_80,code=[sm_80,compute_80]"
    assert s.torch_requirement == "torch==2.5.1+cu121" and s.torch_index.endswith("/cu121")
    assert s.tag.startswith("kernellab:cu121-torch2.5.1-py310-sm80-")


def test_several_gpus_give_sass_for_each_and_ptx_for_the_newest():
    s = resolve(M, cuda="12.8", gpu=["h100", "a100,rtx5090"])
    assert s.gpus == ("a100", "h100", "rtx5090")
    assert s.arch_list == "8.0;9.0;12.0+PTX"
    assert s.gencode.split() == [
        "-gencode=arch=compute_80,code=sm_80", "-gencode=arch=compute_90,code=sm_90",
        "-gencode=arch=compute_120,code=[sm_120,compute_120]"]


def test_aliases_and_capabilities_name_the_same_gpu():
    assert resolve(M, cuda="12.4", gpu="sm_86").gpus == resolve(M, cuda="12.4", gpu="3090").gpus == ("a10",)


def test_no_cuda_given_picks_the_newest_that_targets_every_gpu():
    assert resolve(M, gpu="v100").cuda == "12.9"
    assert resolve(M, gpu="h100").cuda == "13.0"


def test_cpu_target_is_debootstrap_debian_with_cpu_torch():
    s = resolve(M, target="cpu")
    assert (s.kind, s.base, s.python, s.torch_requirement) == ("cpu", "debootstrap:bookworm", "3.11", "torch==2.13.0+cpu")
    assert s.arch_list == "" and s.cuda is None


def test_pip_toolkit_target_uses_pypi_cuda_and_cuda_home_in_the_venv():
    s = resolve(M, target="cu130-pip")
    assert s.kind == "cuda-pip" and s.pip_toolkit == "cuda-toolkit[nvcc,crt,cudart,nvvm,cccl]==13.0.2"
    assert s.cuda_home == "/opt/venv/lib/python3.11/site-packages/nvidia/cu13"
    assert s.torch_requirement == "torch==2.11.0" and s.torch_index is None  # cu130 is PyPI's default build


def test_flags_override_a_named_target_and_change_the_tag():
    a, b = resolve(M, target="cu130-pip"), resolve(M, target="cu130-pip", llvm="15")
    assert b.llvm == "15" and a.tag != b.tag
    assert resolve(M, target="cu130-pip").tag == a.tag, "tags are deterministic"


def test_torch_index_can_be_disabled_for_mirrors():
    s = resolve(M, target="cpu", torch_index="")
    assert s.torch_index is None and s.torch_requirement == "torch==2.13.0+cpu"


# --------------------------------------------------------------------------- refusals

@pytest.mark.parametrize("cuda,gpu,expect", [
    ("10.2", "h100", "sm_90 needs CUDA 11.8 or newer. The nearest pins that resolve and run on H100 / H200: --cuda 11.8"),
    ("11.7", "h100", "sm_90 needs CUDA 11.8 or newer"),
    ("13.0", "v100", "sm_70 needs CUDA 12.9 or older. The nearest pins that resolve and run on Tesla V100: --cuda 12.9"),
    ("12.4", "b200", "The nearest pins that resolve and run on B200 / GB200: --cuda 12.8"),
    ("12.6", "rtx5090", "The nearest pins that resolve and run on RTX 5090 / RTX PRO 6000: --cuda 12.8"),
    ("12.1", "k80", "The nearest pins that resolve and run on Tesla K80: --cuda 11.8"),
])
def test_refuses_an_arch_the_toolkit_cannot_target(cuda, gpu, expect):
    msg = refuse(cuda=cuda, gpu=gpu)
    assert f"CUDA {cuda} cannot target" in msg and expect in msg


def test_refuses_torch_without_a_wheel_of_the_cudas_major_and_names_the_range():
    msg = refuse(cuda="12.1", gpu="a100", torch="1.13.1")
    assert "PyTorch 1.13.1 has no wheel for CUDA 12.1 (published: cpu, cu116, cu117)" in msg and "2.1.2–" in msg


def test_a_pinned_torch_takes_a_newer_minor_of_the_same_cuda_major_pypis_build_first():
    # Debian 11 ships CUDA 11.2; PyTorch 1.13.1 on PyPI is its cu117 build: extensions compile (same major).
    s = resolve(M, cuda="11.2", toolkit="debian", gpu=["a100"], torch="1.13.1")
    assert (s.torch_variant, s.torch_requirement, s.torch_index) == ("cu117", "torch==1.13.1", None)
    assert any("newer than the CUDA 11.2 toolkit" in w and "450.80.02" in w for w in s.warnings)
    # An older minor of the same major still comes first (cu111 for 11.3), and 12.x never takes an 11.x wheel.
    assert resolve(M, cuda="11.3", gpu=["a10"], torch="1.8.0").torch_variant == "cu111"
    assert resolve(M, cuda="12.1", gpu=["a100"], torch="2.6").torch_variant == "cu124"


def test_a_torch_pin_may_name_its_wheel_as_pip_does():
    s = resolve(M, cuda="11.8", toolkit="debian", gpu=["a100"], torch="2.0.1+cu117")
    assert (s.torch, s.torch_variant, s.torch_requirement) == ("2.0.1", "cu117", "torch==2.0.1")
    assert resolve(M, cuda="11.8", toolkit="debian", gpu=["a100"], torch="2.0.1+cu118").torch_requirement == \
        "torch==2.0.1+cu118"
    assert "no cu121 wheel (published: cpu, cu117, cu118)" in refuse(cuda="11.8", gpu="a100", torch="2.0.1+cu121")
    msg = refuse(cuda="12.1", gpu="a100", torch="2.1.2+cu118")
    assert "is for CUDA 11.8, another major than CUDA 12.1" in msg and msg.endswith(
        "The nearest pins that resolve and run on A100 / A30: --cuda 12.1 --torch 2.1.2.")


def test_refuses_python_outside_the_torch_range():
    msg = refuse(cuda="12.1", gpu="a100", torch="2.1", python="3.12")
    assert "supports Python 3.8–3.11, not 3.12" in msg


def test_refuses_gcc_above_the_cuda_maximum():
    assert "max gcc 12" in refuse(cuda="12.1", gpu="a100", gcc=13)


def test_picks_an_older_gcc_when_the_os_default_is_too_new():
    cuda = M.cuda["12.1"]
    patched = dataclasses.replace(cuda, images={**cuda.images, "ubuntu24.04": BaseImage("x/cuda:12.1-noble", "")})
    m = dataclasses.replace(M, cuda={**M.cuda, "12.1": patched})
    s = resolve(m, cuda="12.1", gpu="a100", ubuntu="24.04")
    assert s.gcc == 12 and M.os["ubuntu24.04"].gcc_default == 13


def test_refuses_variant_arch_lists_that_miss_the_gpu():
    msg = refuse(cuda="12.8", gpu="p100", torch="2.8")
    assert "PyTorch 2.8.0 cu128 wheels carry no kernels for Tesla P100 (sm_60)" in msg
    assert "--cuda 12.8 --torch 2.8.0+cu126" in msg   # the same release's cu126 wheel has sm_60


def test_refuses_deleted_base_images_with_a_way_out():
    msg = refuse(cuda="10.2", gpu="t4")
    assert "no base image" in msg and "deleted" in msg and "--base-image" in msg


@pytest.mark.parametrize("kw,listed", [
    (dict(cuda="12.3", gpu="a100"), "known: 10.2, 11.0, 11.1, 11.2, 11.3, 11.4, 11.5, 11.6, 11.7, 11.8, 12.1"),
    (dict(cuda="12.1", gpu="x999"), "known GPUs: k80 (3.7)"),
    (dict(cuda="12.1", gpu="a100", torch="9.9"), "known: 1.8.0, 1.8.1, 1.9.1, 1.10.2"),
    (dict(target="nope"), "known targets: "),
    (dict(cuda="12.1", gpu="a100", llvm="99"), "known: 6.0, 7, 8, 9, 10, 11"),
])
def test_unknown_versions_list_the_known_ones(kw, listed):
    assert listed in refuse(**kw)


@pytest.mark.parametrize("kw,meant", [
    (dict(gpu="a1000"), "unknown GPU `a1000` (did you mean a100?)"),
    (dict(gpu="h10", cuda="12.4"), "(did you mean h100?)"),
    (dict(cuda="12.3", gpu="a100"), "unknown CUDA version `12.3` (did you mean 12.4?)"),
    (dict(cuda="12.1", gpu="a100", torch="2.5.2"), "unknown PyTorch version `2.5.2` (did you mean 2.5.1?)"),
    (dict(cuda="12.1", gpu="a100", llvm="188"), "unknown LLVM version `188` (did you mean 18?)"),
    (dict(gpu="cpu", os="debian-12"), "unknown OS `debian-12` (did you mean debian12?)"),
    (dict(cuda="12.1", gpu="a100", ubuntu="22.4"), "no nvidia/cuda image for ubuntu22.4 (did you mean ubuntu22.04?)"),
    (dict(target="cu12-a100"), "unknown target `cu12-a100` (did you mean cu121-a100?)"),
    (dict(gpu="a100", toolkit="pipp"), "unknown toolkit `pipp` (did you mean pip?); use debian"),
])
def test_unknown_names_suggest_the_closest_known_one(kw, meant):
    assert meant in refuse(**kw)


def test_nothing_is_suggested_when_nothing_is_close():
    msg = refuse(cuda="12.1", gpu="x999")
    assert "did you mean" not in msg and "known GPUs: k80 (3.7)" in msg


def test_arch_refusals_state_only_what_the_matrix_knows():
    # sm_86 support started with CUDA 11.1, the matrix's oldest that can target it.
    msg = refuse(cuda="10.2", gpu="3090")
    assert "sm_86 needs CUDA 11.1 or newer." in msg
    assert "starts with" not in msg and "support for" not in msg
    msg = refuse(cuda="13.0", gpu="v100")
    assert "sm_70 needs CUDA 12.9 or older. The nearest pins that resolve and run on Tesla V100: --cuda 12.9" in msg
    assert "ends with" not in msg
    # A toolkit between two that can: the matrix's versions are listed, nothing is claimed about the rest.
    cuda = {k: dataclasses.replace(c, archs=tuple(a for a in c.archs if a != "8.0")) if k in ("12.1", "12.4") else c
            for k, c in M.cuda.items()}
    msg = refuse_in(dataclasses.replace(M, cuda=cuda), cuda="12.4", gpu="a100")
    assert "the CUDA versions in the matrix that can target it are 11.0, 11.1, 11.2, 11.3, 11.4, 11.5, 11.6, 11.7, " \
           "11.8, 12.6, 12.8, 12.9, 13.0" in msg


def refuse_in(matrix, **kw) -> str:
    with pytest.raises(ResolveError) as e:
        resolve(matrix, **kw)
    assert "\n" not in str(e.value)
    return str(e.value)


def test_refuses_unavailable_os_python_and_mixing_cpu_with_gpus():
    assert "available: ubuntu20.04, ubuntu22.04" in refuse(cuda="12.1", gpu="a100", ubuntu="24.04")
    assert "cannot be combined" in refuse(gpu="cpu,a100")
    assert "drop --cuda" in refuse(gpu="cpu", cuda="12.1")
    assert "no GPU given" in refuse(cuda="12.1")


def test_base_image_is_verified_not_reinstalled():
    facts = BaseFacts(python="3.12.3", torch="2.11.0+cu130", torch_cuda="13.0")
    s = resolve(M, base_image="site:gpu", gpu="h100", base_facts=facts)
    assert (s.kind, s.torch, s.torch_variant, s.cuda, s.python) == ("base-image", "2.11.0", "preinstalled", "13.0", "3.12")
    assert "has PyTorch 2.11.0+cu130, not 2.5" in refuse(base_image="site:gpu", gpu="h100", torch="2.5", base_facts=facts)
    assert "CUDA 13.0 cannot target Tesla V100" in refuse(base_image="site:gpu", gpu="v100", base_facts=facts)
    cpu_facts = BaseFacts(python="3.11.2", torch="2.13.0+cpu", torch_cuda=None)
    assert "CPU build" in refuse(base_image="site:cpu", gpu="h100", base_facts=cpu_facts)


def test_a_paper_environment_is_data_only(tmp_path):
    shutil.copy(ROOT / "docker" / "matrix.toml", tmp_path / "matrix.toml")
    shutil.copy(ROOT / "docker" / "wheels.toml", tmp_path / "wheels.toml")
    (tmp_path / "targets.toml").write_text(
        '[target.gnn-2021]\ndescription = "a GNN paper"\ncuda = "11.8"\ngpu = ["a10"]\n'
        'torch = "2.1.2"\npython = "3.9"\nllvm = "12"\nos = "ubuntu20.04"\npip = ["dgl==1.1.3"]\n')
    m = targets.load(tmp_path)
    s = resolve(m, target="gnn-2021")
    assert (s.cuda, s.torch, s.python, s.llvm, s.extra_pip) == ("11.8", "2.1.2", "3.9", "12", ("dgl==1.1.3",))
    assert "dgl==1.1.3" in render.dockerfile(s, m)


# --------------------------------------------------------------------------- rendering

def test_dockerfiles_need_no_syntax_line_and_cache_apt_and_pip():
    for name, t in M.targets.items():
        if kinds.probes(t.base):
            continue  # a --base-image target is resolved against the image itself (docker tests)
        text = render.dockerfile(resolve(M, target=name), M)
        assert "# syntax" not in text
        assert "--mount=type=cache" in text and "--mount=type=secret,id=pipconf" in text
        assert text.rstrip().splitlines()[-1].strip().startswith("kernellab.min-driver"), "labels come last"


def test_rendered_pip_toolkit_fixes_lib64_and_cuda_home():
    text = render.dockerfile(resolve(M, target="cu130-pip"), M)
    assert "pip install 'cuda-toolkit[nvcc,crt,cudart,nvvm,cccl]==13.0.2'" in text
    assert "ln -sfn lib lib64" in text and "lib/libcudart.so" in text
    assert "ENV CUDA_HOME=/opt/venv/lib/python3.11/site-packages/nvidia/cu13" in text
    assert 'TORCH_CUDA_ARCH_LIST="8.0;8.6;8.9;9.0+PTX"' in text


def test_rendered_labels_carry_every_resolved_version():
    s = resolve(M, target="tvm07-paper")
    text = render.dockerfile(s, M)
    for label in ('kernellab.cuda="11.8"', 'kernellab.torch="2.1.2"', 'kernellab.python="3.8"', 'kernellab.gcc="9"',
                  'kernellab.llvm="10"', 'kernellab.cudnn="8.9.6.50"', f'kernellab.spec-sha256="{s.digest}"'):
        assert label in text
    assert "FROM nvidia/cuda:11.8.0-cudnn8-devel-ubuntu20.04" in text
    # LLVM as a library (llvm_role): llvm-config and its headers, no clang
    assert "'scipy<1.11'" in text and "llvm-10-dev" in text and "clang-10" not in text


def test_locked_render_installs_exactly_the_lock_and_pins_the_digest():
    s = resolve(M, target="cu121-a100")
    digest = "nvidia/cuda@sha256:" + "a" * 64
    text = render.dockerfile(s, M, locked=True, base_digest=digest)
    assert f"FROM {digest}" in text and "--no-deps" in text and "-r /tmp/kernellab-lock.txt" in text


def test_committed_dockerfiles_match_the_matrix():
    assert write_rendered(check=True) == [], "run `invoke render-dockerfiles` and commit docker/rendered/"


# --------------------------------------------------------------------------- the task layer

def test_bad_input_is_one_sentence_and_a_nonzero_exit_with_nothing_built():
    p = subprocess.run([sys.executable, "-m", "invoke", "build-image", "--cuda", "13.0", "--gpu", "v100"],
                       cwd=ROOT, capture_output=True, text=True)
    assert p.returncode == 2
    assert p.stderr.strip().startswith("kernellab: CUDA 13.0 cannot target Tesla V100")
    assert "Traceback" not in p.stderr and len(p.stderr.strip().splitlines()) == 1


def test_dry_run_prints_the_spec_and_the_dockerfile_without_docker():
    p = subprocess.run([sys.executable, "-m", "invoke", "build-image", "--cuda", "12.4", "--gpu", "h100", "--dry-run"],
                       cwd=ROOT, capture_output=True, text=True, env={"PATH": "/usr/bin:/bin", "HOME": "/tmp",
                                                                     "DOCKER_HOST": "unix:///nonexistent.sock"})
    assert p.returncode == 0, p.stderr
    assert "torch       2.6.0 (cu124)" in p.stdout and "FROM nvidia/cuda:12.4.1-cudnn-devel-ubuntu22.04" in p.stdout


# --------------------------------------------------------------------------- paper-era stacks (2020-2023)

def test_bytetransformers_own_environment_resolves():
    s = resolve(M, cuda="11.6", torch="1.13.0", python="3.9", gpu="a100")
    assert (s.cuda_full, s.torch, s.torch_variant, s.python, s.os) == ("11.6.2", "1.13.0", "cu116", "3.9", "ubuntu20.04")
    assert s.base == "nvidia/cuda:11.6.2-cudnn8-devel-ubuntu20.04" and s.torch_requirement == "torch==1.13.0+cu116"
    assert s.torch_index == "https://download.pytorch.org/whl/cu116"  # cu117 is PyPI's; cu116 only the index's


def test_the_mlsys22_artifacts_environment_resolves_on_an_older_minors_wheel():
    s = resolve(M, cuda="11.3", torch="1.8.0", python="3.8", gpu="3090")
    assert (s.cuda, s.torch, s.torch_variant, s.python, s.ccs) == ("11.3", "1.8.0", "cu111", "3.8", ("8.6",))
    assert any("PyTorch 1.8.0 has no cu113 wheel: its cu111 wheel" in w for w in s.warnings)
    assert any("only on PyTorch's own index (https://download.pytorch.org/whl/cu111)" in w for w in s.warnings)
    assert resolve(M, cuda="11.3", torch="1.8.0", python="3.8", gpu="3090", ubuntu="18.04").os == "ubuntu18.04"


def test_faiths_pins_on_an_rtx_3090_are_refused_naming_the_nearest_valid_ones():
    msg = refuse(cuda="10.2", torch="1.6", gpu="3090")
    assert msg.startswith("CUDA 10.2 cannot target A10 / A40 / RTX 30 (sm_86): sm_86 needs CUDA 11.1 or newer")
    assert "The nearest pins that resolve and run on A10 / A40 / RTX 30: --cuda 11.1 --torch 1.8.0" in msg


def test_without_a_pin_the_toolkits_own_wheel_is_chosen_never_an_older_minors():
    s = resolve(M, cuda="11.3", gpu="3090")
    assert s.torch_variant == "cu113" and s.torch == "1.12.1"
    assert not any("wheel:" in w for w in s.warnings)


def test_llvm_as_a_library_is_not_held_against_cudas_clang_limit():
    # TVM 0.7 links LLVM 10 (llvm-config); nvcc compiles the CUDA: no clang warning for the paper's target.
    assert not any("clang" in w for w in resolve(M, target="tvm07-paper").warnings)
    # The same pins with clang as the CUDA compiler (the default role) are warned about.
    s = resolve(M, cuda="11.8", gpu="a100", ubuntu="20.04", llvm="10", torch="2.1.2", python="3.8")
    assert any("clang 10 compiles CUDA only up to 10.1 as a CUDA compiler" in w for w in s.warnings)


def test_an_unknown_llvm_role_is_one_sentence():
    from kernellab.errors import ConfigError
    from kernellab.image.target_table import parse_target

    with pytest.raises(ConfigError, match=r"`llvm_role` must be \"library\" .* or \"cuda\" .*, not str 'both'"):
        parse_target("x", {"llvm": "10", "llvm_role": "both"})
