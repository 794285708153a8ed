"""`invoke recipe profile` without Docker: which case it profiles, the refusals it makes before building anything,
the command lines it runs in the image (nsys's program, ncu's without the NVTX filter), and `--on slurm`'s merge of
the task folders its nodes leave."""
from __future__ import annotations

import io
import json
import os
from pathlib import Path

import pytest

from kernellab.errors import ClusterUsageError, KernellabError, ProfileError, RecipeError
from kernellab.nsight import ncu, tools
from kernellab.places import Flags
from kernellab.recipes import capture, profile_cluster, read
from kernellab.recipes import profile as profiles

NO_GPU = Flags(gpu_mode="none")  # a run without a GPU


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
        profiles.profile("demo", tool="ncu", where=NO_GPU, out=io.StringIO())


@pytest.mark.parametrize(("flags", "says"), [
    ({"tool": "vtune"}, "--tool vtune: use nsys"),
    ({"kernel": "transpose"}, "add --tool ncu"),
    ({"clocks": True}, "--clocks profiles Nsight Compute's kernels again at the GPU's own clocks; add --tool ncu."),
    ({"tool": "ncu", "kernel": "("}, "not a regular expression"),
    ({"seconds": 0}, "--seconds 0"),
    ({"experiment": "tiled-cuda"}, "tiled-cuda needs CUDA, and target cpu has none"),
])
def test_flags_that_cannot_work_are_refused_in_one_sentence(flags, says):
    with pytest.raises(KernellabError) as e:
        profiles.profile("demo", where=NO_GPU, out=io.StringIO(), **flags)
    assert says in str(e.value)


def test_on_a_cluster_ncu_and_bad_flags_are_refused_before_anything_is_built(tmp_path):
    prof = tmp_path / "cluster.toml"
    prof.write_text(f'runtime = "docker"\nshared = "{tmp_path}"\n[gpu_types]\nh100 = "--gres=gpu:h100:1"\n')
    with pytest.raises(ClusterUsageError, match="--tool ncu profiles the kernels the timeline ranks first"):
        profile_cluster.job("demo", tool="ncu", dry_run=True, out=io.StringIO())
    with pytest.raises(RecipeError, match="--seconds -1"):
        profile_cluster.job("demo", seconds=-1, dry_run=True, out=io.StringIO())


@pytest.mark.nsys
def test_merge_makes_each_task_folder_a_profile_and_the_run_a_table_per_gpu_type(tmp_path, monkeypatch):
    """A task folder as a node leaves it (capture's main with this machine's nsys, a CPU program, --about handed
    back), and one whose capture was refused: merge writes the first's profile from its export and says the other's
    problem; merging again (a --resume) reads the profile back."""
    exe = real_nsys()
    real_program = capture.program
    monkeypatch.setattr(capture, "program", lambda cwd, command, folder: [
        *real_program(cwd, command, folder)[:-1], real_program(cwd, command, folder)[-1].replace(
            f"cd /src/{cwd}", f"cd {tmp_path}")])  # no /src here: the case runs in tmp_path
    doc = {"format": "kernellab-recipe-profile/1", "recipe": "demo", "experiment": "blocked", "case": {"n": 64},
           "command": "echo mismatches: 0; sleep 0.3", "cwd": ".", "target": "cpu", "cuda": None, "with_gpu": False,
           "kernels_expected": False, "seconds_limit": 60.0, "argv": [], "tool": "nsys", "paper": {},
           "image": {"id": "sha256:" + "ab" * 32, "tag": "kernellab-recipe:demo"}, "sources": {}, "patches": [],
           "values": {}}
    local = tmp_path / "results" / "run"
    h100, a100 = local / "h100" / "task-0", local / "a100" / "task-0"
    h100.mkdir(parents=True)
    monkeypatch.setenv("KERNELLAB_OUT", str(h100))
    assert capture.main(["--command", doc["command"], "--stem", "h100-blocked-n64", "--seconds", "60",
                         "--nsys", str(exe), "--about", json.dumps(doc)]) == 0
    assert (h100 / "h100-blocked-n64.sqlite").is_file() and json.loads((h100 / "inside.json").read_text())["about"] == doc
    a100.mkdir(parents=True)
    (a100 / "inside.json").write_text(json.dumps({"problem": "nsys is neither in the image nor here.", "about": doc}))
    from kernellab.cluster.follow import Outcome
    from kernellab.cluster.plan import Task

    tasks = [Outcome(Task(g, 0, "task-0", []), "done", "", status) for g, status in [
        ("h100", {"host": "node1", "gpus": [{"name": "NVIDIA H100", "uuid": "GPU-1"}], "started": 1.0}),
        ("a100", {"host": "node2"})]]
    table = profile_cluster.merge(local, ["h100", "a100"], tasks)
    assert table.startswith("## Top kernels by GPU time, per GPU type: demo, blocked n=64")
    assert "| h100 | none: CUDA was not traced (a CPU case); the case took" in table
    assert "| a100 | nsys is neither in the image nor here. | | |" in table and "`h100/task-0/summary.md`" in table
    summary = (h100 / "summary.md").read_text()
    assert "report: `h100-blocked-n64.nsys-rep`" in summary and "mismatches: 0" in summary
    made = json.loads((h100 / "profile.json").read_text())
    assert made["machine"] == {"gpu": {"name": "NVIDIA H100"}, "driver": None, "clocks": {}, "host": "node1",
                               "gpu_type": "h100"}
    assert made["nsys"]["trace"] == ["nvtx", "osrt"] and made["top_kernels"] == [] and made["recipe"] == "demo"
    assert (h100 / "timeline.png").is_file() and not (h100 / "h100-blocked-n64.sqlite").exists()
    assert profile_cluster.merge(local, ["h100", "a100"], tasks) == table


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


def test_the_nsight_compute_table_counts_each_kernels_warp_instructions():
    """The recipe's table has the op profile's warp-instruction column, read the same way (ncu.summarize)."""
    raw = (Path(__file__).parent / "data" / "ncu-raw-softmax-backward-decode-h200-full.csv").read_text()
    kernels = [ncu.summarize(r) for r in ncu.parse_raw_csv(raw)]
    table = profiles._ncu_table(capture.Counters(version="2025.3", patterns=["softmax"], kernels=kernels))
    assert "| smem | warp instructions | limiter |" in table[2]
    assert table[4].startswith("| `softmax_backward_kernel` |") and "| 128 B | 16K | latency |" in table[4]
    assert "| 32 B | 8.8K | latency |" in table[5]


FAKE_NCU = """#!{python}
# A stand-in for ncu: --version; a profiling run (its argv logged, the report written); --import prints a raw CSV of
# two kernels, their times and SM clocks as an H200 gave them locked to base ("-boost" reports: at its own clocks).
import json
import sys
from pathlib import Path
argv = sys.argv[1:]
if argv == ["--version"]:
    print("NVIDIA (R) Nsight Compute Command Line Profiler\\nVersion 2025.3.1.0 (build 1)")
elif "--import" in argv:
    boost = "-boost" in argv[argv.index("--import") + 1]
    print('"ID","Kernel Name","gpu__time_duration.sum","sm__cycles_elapsed.avg.per_second"')
    print('"","","ns","Hz"')
    print('"0","layernorm_backward_kernel","%s","%s"' % (("36448", "1958200000") if boost else ("46400", "1482500000")))
    print('"1","softmax_backward_kernel","%s","%s"' % (("24250", "1958200000") if boost else ("24800", "1482500000")))
else:
    with open("{log}", "a") as log:
        log.write(json.dumps(argv) + "\\n")
    Path(argv[argv.index("--export") + 1]).write_text("report")
"""


def test_clocks_profiles_each_pattern_again_at_the_gpus_own_clocks_and_the_table_says_what_followed(
        tmp_path, monkeypatch):
    """`--tool ncu --clocks` through the job the image runs (kernellab.recipes.capture, in this process, with a
    stand-in ncu): a second run of each pattern at `--clock-control none`, matched to the first run's kernels, and the
    summary's two columns and their note."""
    import sys
    from types import SimpleNamespace

    from kernellab import jobs

    log, fake = tmp_path / "argv.log", tmp_path / "ncu"
    fake.write_text(FAKE_NCU.format(python=sys.executable, log=log))
    fake.chmod(0o755)

    timeouts = []

    def inside(place, job, folder):  # the job as the recipe's image runs it, here
        assert job.argv[:3] == ("python", "-m", "kernellab.recipes.capture") and job.tools == ("ncu",)
        timeouts.append(job.timeout)
        monkeypatch.setenv("KERNELLAB_OUT", str(folder))
        assert capture.main([*job.argv[3:], "--ncu", str(fake)]) == 0
        return json.loads((folder / capture.STATUS).read_text())

    monkeypatch.setattr(profiles, "_inside", inside)
    job = jobs.Job("recipe-profile", ("python", "-m", "kernellab.recipes.capture", "--command", "true"), timeout=900)
    counters = profiles._counters(None, job, tmp_path, SimpleNamespace(kernels=[]), "backward", clocks=True)
    runs = [" ".join(json.loads(line)) for line in log.read_text().splitlines()]
    assert len(runs) == 2 and "--clock-control base" in runs[0] and "--clock-control none" in runs[1]
    assert "--metrics gpu__time_duration.sum,sm__cycles_elapsed.avg.per_second" in runs[1]
    assert all("--kernel-name regex:backward" in r and "--nvtx-include" not in r for r in runs)
    assert sorted(p.name for p in tmp_path.glob("ncu-*.csv")) == ["ncu-1-boost.csv", "ncu-1.csv"]
    layernorm, softmax = counters["kernels"]
    assert counters["clocks"] and layernorm["boost_duration_ns"] == 36448.0
    assert layernorm["clock_share"] == pytest.approx(0.87, abs=0.01) and softmax["clock_share"] < 0.1
    table = profiles._ncu_table(counters)
    assert "Each kernel again at the GPU's own clocks (`--clocks`)." in table[0]
    assert table[2].startswith("| kernel | time | time at own clocks | follows SM clock | DRAM % |")
    assert table[4].startswith("| `layernorm_backward_kernel` | 46.4 µs | 36.4 µs (1.48 -> 1.96 GHz) | 87% |")
    assert table[-1].startswith("Follows SM clock: the share of the SM clock's change")
    plain = profiles._counters(None, job, tmp_path, SimpleNamespace(kernels=[]), "backward")
    assert "clocks" not in plain and len(log.read_text().splitlines()) == 3  # one more run, at base clocks
    assert "follows SM clock" not in "\n".join(profiles._ncu_table(plain))
    assert timeouts == [1800, 900]  # each ncu run runs the whole case: each gets the capture's limit


def test_the_images_job_refuses_clocks_without_ncu(capsys):
    with pytest.raises(SystemExit):
        capture.main(["--command", "true", "--clocks"])
    assert "--clocks profiles Nsight Compute's kernels again at the GPU's own clocks; add --tool ncu." in (
        capsys.readouterr().err)
