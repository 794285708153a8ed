"""`invoke recipe profile` without Docker: which case it profiles, the refusals it makes before building anything,
and the command lines it runs in the image (nsys's program, ncu's without the NVTX filter)."""
from __future__ import annotations

import io
import os
from pathlib import Path

import pytest

from kernellab.errors import ClusterUsageError, KernellabError, ProfileError, RecipeError
from kernellab.nsight import ncu, tools
from kernellab.recipes import capture, read
from kernellab.recipes import profile as profiles


def real_nsys() -> Path:
    """This machine's nsys (tools.find), or a skip; KERNELLAB_REQUIRE_NSYS=1 fails instead."""
    found = tools.find("nsys")
    if found is None:
        why = "needs Nsight Systems (KERNELLAB_NSYS, PATH or /opt/nvidia/nsight-systems; docker/nsight-systems.sh)"
        if os.environ.get("KERNELLAB_REQUIRE_NSYS") == "1":
            pytest.fail(f"KERNELLAB_REQUIRE_NSYS=1 but this test {why}", pytrace=False)
        pytest.skip(why)
    return found


def test_the_default_case_is_the_first_experiments_first_grid_point_and_case_picks_another():
    demo = read.load("demo")
    exp, params = profiles.choose_case(demo, None, None)
    assert (exp.name, params) == ("blocked", {"n": 2048})
    exp, params = profiles.choose_case(demo, "naive", "n=4096")
    assert (exp.name, params) == ("naive", {"n": 4096})


def test_an_unknown_case_or_experiment_is_one_sentence_naming_the_valid_ones():
    demo = read.load("demo")
    with pytest.raises(RecipeError) as e:
        profiles.choose_case(demo, "blocked", "n=1000")
    assert "n=2048, n=4096" in str(e.value) and str(e.value).count(".") <= 2
    with pytest.raises(RecipeError) as e:
        profiles.choose_case(demo, "blocked", "m=2048")
    assert "its cases: n=2048, n=4096" in str(e.value)
    with pytest.raises(RecipeError) as e:
        profiles.choose_case(demo, "blockd", None)
    assert "no experiment `blockd`" in str(e.value) and "blocked" in str(e.value)


def test_ncu_is_refused_where_the_case_has_no_gpu_before_anything_is_built():
    with pytest.raises(ProfileError, match="Nsight Compute reads a GPU's counters.*target cpu has no CUDA"):
        profiles.profile("demo", tool="ncu", gpu_mode=False, out=io.StringIO())


@pytest.mark.parametrize(("flags", "says"), [
    ({"tool": "vtune"}, "--tool vtune: use nsys"),
    ({"kernel": "transpose"}, "add --tool ncu"),
    ({"tool": "ncu", "kernel": "("}, "not a regular expression"),
    ({"seconds": 0}, "--seconds 0"),
    ({"experiment": "tiled-cuda"}, "tiled-cuda needs CUDA, and target cpu has none"),
])
def test_flags_that_cannot_work_are_refused_in_one_sentence(flags, says):
    with pytest.raises(KernellabError) as e:
        profiles.profile("demo", gpu_mode=False, out=io.StringIO(), **flags)
    assert says in str(e.value)


def test_a_cluster_profile_is_refused():
    with pytest.raises(ClusterUsageError, match="captures here"):
        profiles.refuse_on("slurm")
    profiles.refuse_on(None)


def test_the_case_runs_as_the_recipe_runs_it_with_its_output_and_exit_code_kept():
    argv = capture.program("build", "./bench --n 4", "/kl-out")
    assert argv[:4] == ["bash", "-eo", "pipefail", "-c"]
    script = argv[4].splitlines()
    assert script[-2:] == ["cd /src/build", "./bench --n 4"]
    assert "/kl-out/exit-code" in script[0] and script[1] == "exec > /kl-out/output.txt 2>&1"


def test_ncu_on_a_papers_program_has_no_nvtx_filter_and_the_kernel_regex():
    argv = ncu.ncu_argv("/x/ncu", Path("r.ncu-rep"), ["--launch-count", "3", "bash", "-c", "x"], kernel="tile|naive",
                        nvtx=False)
    assert "--nvtx-include" not in argv and "--nvtx" not in argv
    assert argv[argv.index("--kernel-name") + 1] == "regex:tile|naive"
    assert argv[-5:] == ["--launch-count", "3", "bash", "-c", "x"]
    assert "--nvtx-include" in ncu.ncu_argv("/x/ncu", Path("r.ncu-rep"), ["p"])   # invoke profile's stays


def test_no_nsys_is_one_sentence():
    assert "neither in the recipe's image nor installed here" in capture.preflight(None, None)


def test_an_nsys_older_than_the_images_cuda_is_refused_before_capturing():
    """The real binary's version against a CUDA newer than any 2023 nsys traces, and against none."""
    exe = real_nsys()
    problem = capture.preflight(exe, "13.0")
    assert problem and "traces CUDA up to" in problem and "CUDA 13.0" in problem, problem
    assert capture.preflight(exe, None) is None
