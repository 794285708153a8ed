"""invoke profile / sanitize without a GPU: ncu's command line, reading ncu's CSV export (kernellab.nsight.ncu),
the summary table (kernellab.nsight.report), compute-sanitizer's output and what `invoke sanitize` prints
from it (captured on the H100 and H200 machines, in tests/data/), and doctor's view of counter permissions from
stand-in driver params files."""
from __future__ import annotations

import dataclasses
import stat
from pathlib import Path

import pytest

from kernellab import proc
from kernellab.errors import ConfigError, ProfileError
from kernellab.nsight import calls, ncu, report, sanitize, tools
from kernellab.ops.spec import KERNELS, parse_spec

DATA = Path(__file__).parent / "data"


def test_ncu_profiles_only_the_nvtx_range_with_clocks_and_caches_controlled(tmp_path: Path) -> None:
    argv = ncu.ncu_argv("/x/ncu", tmp_path / "r.ncu-rep", ["python", "-m", "kernellab.nsight.profile", "--launch"])
    joined = " ".join(argv)
    assert argv[0] == "/x/ncu" and argv[-4:] == ["python", "-m", "kernellab.nsight.profile", "--launch"]
    assert "--nvtx --nvtx-include kernellab/" in joined
    assert "--clock-control base" in joined and "--cache-control all" in joined
    assert "--set basic --section WarpStateStats" in joined
    assert f"--export {tmp_path / 'r.ncu-rep'} --force-overwrite" in joined
    assert "--kernel-name" not in joined
    full = ncu.ncu_argv("ncu", tmp_path / "r", ["p"], set_name="full", kernel=r"softmax_\w+")
    assert "--set full" in " ".join(full) and "WarpStateStats" not in full
    assert full[full.index("--kernel-name") + 1] == r"regex:softmax_\w+"
    assert full[full.index("--kernel-name-base") + 1] == "function"  # no namespace, template or parameters


def test_clocks_second_run_takes_only_the_time_and_the_sm_clock_at_the_gpus_own_clocks(tmp_path: Path) -> None:
    boost = ncu.ncu_argv("ncu", tmp_path / "b.ncu-rep", ["p"], set_name="full", kernel="k", boost=True)
    joined = " ".join(boost)
    assert "--clock-control none" in joined and "--cache-control all" in joined and "--set" not in boost
    assert boost[boost.index("--metrics") + 1] == "gpu__time_duration.sum,sm__cycles_elapsed.avg.per_second"
    assert "--nvtx-include kernellab/" in joined and boost[boost.index("--kernel-name") + 1] == "regex:k"
    for set_name in ncu.SETS:  # the first run records its SM clock in either set
        argv = ncu.ncu_argv("ncu", tmp_path / "r", ["p"], set_name=set_name)
        assert "--clock-control base" in " ".join(argv) and ncu.SM_CLOCK in argv[argv.index("--metrics") + 1]


def test_the_share_of_the_sm_clock_a_kernels_time_follows() -> None:
    """Figures of the H200 (2026-11-30): layernorm's float16 backward at 4096x4096 follows most of the SM clock's
    change, softmax's at the same shape, at 82% of the copy bandwidth, hardly any."""
    norm = ncu.clock_share(46_400, 1.4825e9, 36_448, 1.9582e9)
    soft = ncu.clock_share(24_832, 1.4792e9, 24_160, 1.9623e9)
    assert norm is not None and soft is not None
    assert 0.86 < norm < 0.88 and 0.09 < soft < 0.11
    assert ncu.clock_share(100.0, 1e9, 50.0, 2e9) == pytest.approx(1.0)  # time halves with the clock doubled
    assert ncu.clock_share(100.0, 1e9, 100.0, 2e9) == pytest.approx(0.0)
    assert ncu.clock_share(100.0, 1.0e9, 99.0, 1.04e9) is None  # the clocks hardly differed: no share
    assert ncu.clock_share(None, 1e9, 50.0, 2e9) is None and ncu.clock_share(100.0, 1e9, 50.0, None) is None


def test_the_second_run_is_matched_to_the_first_by_order_and_name_and_shown_beside_it() -> None:
    kernel = ncu.summarize(ncu.parse_raw_csv((DATA / "ncu-raw-softmax-h100.csv").read_text())[0])
    first = [dict(kernel, duration_ns=46_400.0, sm_hz=1.4825e9), dict(kernel, kernel="other", sm_hz=1.4825e9)]
    boost = [{"kernel": "softmax_kernel", "duration_ns": 36_448.0, "sm_hz": 1.9582e9},
             {"kernel": "renamed", "duration_ns": 1.0, "sm_hz": 1.9582e9}]
    ours, other = ncu.with_boost(first, boost)
    assert ours["boost_duration_ns"] == 36_448.0 and ours["clock_share"] == pytest.approx(0.87, abs=0.01)
    assert other["boost_duration_ns"] is None and other["clock_share"] is None  # not the same kernel: no share
    doc = {"op": "layernorm", "shape": {"rows": 4096, "cols": 4096}, "dtype": "float16", "gpu": "H200", "mode": "ncu",
           "set": "basic", "warmup_calls": 3, "seconds": 30.0, "ncu": {"version": "2025.3", "boost_run": True},
           "impls": {"kernellab": {"role": "candidate", "kernels": [ours, other]}}}
    text = report.to_markdown(doc)
    assert "| time | time at own clocks | follows SM clock | DRAM % |" in text
    assert "| 46.4 µs | 36.4 µs (1.48 -> 1.96 GHz) | 87% | 81.3 |" in text
    assert "| `other` | 41.2 µs | – | – | 81.3 |" in text
    assert "Each call again at the GPU's own clocks (`--clocks`)." in text and "About 100%: the time" in text
    plain = report.to_markdown(dict(doc, ncu={"version": "2025.3"}))
    assert "follows SM clock" not in plain and "| 46.4 µs | 81.3 |" in plain


def test_bad_set_and_bad_kernel_regex_are_one_sentence(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="unknown --set 'most'"):
        ncu.ncu_argv("ncu", tmp_path / "r", ["p"], set_name="most")
    with pytest.raises(ConfigError, match="is not a regular expression"):
        ncu.ncu_argv("ncu", tmp_path / "r", ["p"], kernel="softmax(")


def test_the_h100_report_reads_back_as_one_kernel_summary() -> None:
    rows = ncu.parse_raw_csv((DATA / "ncu-raw-softmax-h100.csv").read_text())
    assert len(rows) == 1
    k = ncu.summarize(rows[0])
    assert k["kernel"] == "softmax_kernel"
    assert k["duration_ns"] == 41152
    assert k["dram_pct"] == pytest.approx(81.33) and k["l2_pct"] == pytest.approx(83.06)
    assert k["sm_pct"] == pytest.approx(47.13)
    assert (k["occupancy_achieved_pct"], k["occupancy_theoretical_pct"]) == (pytest.approx(89.85), 100)
    assert k["registers"] == 32 and k["shared_bytes"] == 256 and k["block_size"] == 256 and k["grid_size"] == 4096
    assert k["dram_gbps"] == pytest.approx((67_122_944 + 45_023_744) / 41152)
    assert k["limiter"] == "memory (L2)"  # L2 83.06% beside DRAM 81.33% and L1 30.54%
    assert [s["reason"] for s in k["stalls"]] == ["long_scoreboard", "short_scoreboard", "mio_throttle"]
    assert "selected" not in {s["reason"] for s in k["stalls"]}  # issuing is not a stall


def test_the_full_set_names_spills_bank_conflicts_and_shared_atomics() -> None:
    """Nsight Compute's full set on the H200, layernorm's fp16 backward at 16384x1024 (the block's row groups then
    added through a float atomicAdd into shared memory): what the summary's hazards say, and that a kernel without
    any (column_sums) says none, and a basic-set profile n/a."""
    backward, sums = map(ncu.summarize, ncu.parse_raw_csv((DATA / "ncu-raw-layernorm-backward-h200-full.csv").read_text()))
    assert backward["kernel"] == "layernorm_backward_kernel" and sums["kernel"] == "column_sums"
    assert (backward["spill_accesses"], backward["shared_atomics"]) == (888_960, 1_098_361)
    assert backward["hazards"] == ["register spills: 889K local loads and stores",
                                   "shared bank conflicts: 48% of 8.3M shared wavefronts",
                                   "shared atomics: 1.1M (a float one is a compare-and-swap loop)"]
    assert sums["hazards"] == []  # 6208 shared wavefronts, no conflict
    basic = ncu.summarize(ncu.parse_raw_csv((DATA / "ncu-raw-softmax-h100.csv").read_text())[0])
    assert basic["hazards"] is None and basic["spill_accesses"] is None
    doc = {"op": "layernorm", "shape": {"rows": 16384, "cols": 1024}, "dtype": "float16", "gpu": "H200", "mode": "ncu",
           "set": "full", "warmup_calls": 3, "seconds": 12.0, "ncu": {"version": "2025.3"},
           "impls": {"kernellab": {"role": "candidate", "kernels": [backward, sums]},
                     "eager": {"role": "baseline", "kernels": [basic]}}}
    rows = [line for line in report.to_markdown(doc).splitlines() if line.startswith("| ")]
    assert rows[0].endswith("| top stalls | hazards |")
    assert rows[1].endswith("| register spills: 889K local loads and stores; shared bank conflicts: 48% of 8.3M "
                            "shared wavefronts; shared atomics: 1.1M (a float one is a compare-and-swap loop) |")
    assert rows[2].startswith("| kernellab (candidate) | `column_sums` |") and rows[2].endswith("| none |")
    assert rows[3].endswith("| n/a |")


def test_the_summary_counts_each_kernels_warp_instructions() -> None:
    """Nsight Compute's full set on the H200, softmax's float16 backward at 4x8192: kernellab's kernel and
    Liger-Kernel's stall alike per instruction, and the count is what tells them apart (Liger-Kernel's computes in
    float16). A profile without the metric says so with a dash."""
    raw = (DATA / "ncu-raw-softmax-backward-decode-h200-full.csv").read_text()
    ours, liger = map(ncu.summarize, ncu.parse_raw_csv(raw))
    assert (ours["kernel"], liger["kernel"]) == ("softmax_backward_kernel", "_softmax_single_block_backward_kernel")
    assert (ours["instructions"], liger["instructions"]) == (16_064, 8_832)
    assert (ours["duration_ns"], liger["duration_ns"]) == (4_192, 3_328)
    older = ncu.summarize(ncu.parse_raw_csv((DATA / "ncu-raw-softmax-h100.csv").read_text())[0])
    assert older["instructions"] is None
    doc = {"op": "softmax", "shape": {"rows": 4, "cols": 8192}, "dtype": "float16", "gpu": "H200", "mode": "ncu",
           "set": "full", "warmup_calls": 3, "seconds": 12.0, "ncu": {"version": "2025.3"},
           "impls": {"kernellab": {"role": "candidate", "kernels": [ours]},
                     "liger": {"role": "published", "kernels": [liger]},
                     "eager": {"role": "baseline", "kernels": [older]}}}
    rows = [line for line in report.to_markdown(doc).splitlines() if line.startswith("| ")]
    assert "| smem | warp instructions | limiter |" in rows[0]
    assert "| 32 | 128 B | 16K | latency |" in rows[1] and "| 32 | 32 B | 8.8K | latency |" in rows[2]
    assert "| 256 B | – | memory (L2) |" in rows[3]


@pytest.mark.parametrize("n, text", [(0, "0"), (999, "999"), (1234, "1.2K"), (9_950, "10K"), (888_960, "889K"),
                                     (999_499, "999K"), (999_600, "1.0M"), (8_300_780, "8.3M"), (12_000_000_000, "12G")])
def test_counts_are_short(n: float, text: str) -> None:
    assert ncu.short_count(n) == text


def test_a_hazard_the_profile_did_not_measure_is_never_called_none() -> None:
    measured = {"spill_accesses": 0.0, "shared_wavefronts": 6208.0, "shared_bank_conflicts": 0.0, "shared_atomics": 0.0}
    assert ncu.hazards(measured) == []
    assert ncu.hazards({**measured, "spill_accesses": None}) == ["register spills: not measured"]
    assert ncu.hazards({**measured, "shared_bank_conflicts": None, "shared_atomics": None}) == [
        "shared bank conflicts: not measured", "shared atomics: not measured"]


def test_units_other_than_the_base_ones_are_converted() -> None:
    text = ('"ID","Kernel Name","gpu__time_duration.sum","dram__bytes_read.sum"\n'
            '"","","usecond","Kbyte"\n"0","k","1,234.5","2"\n')
    k = ncu.summarize(ncu.parse_raw_csv(text)[0])
    assert k["duration_ns"] == pytest.approx(1_234_500) and k["dram_read_bytes"] == 2000
    assert k["dram_pct"] is None and k["dram_gbps"] is None and k["limiter"] == "latency"


@pytest.mark.parametrize("sm, mem, expected", [(90, 20, "compute"), (30, 85, "memory"), (70, 70, "memory"),
                                               (40, 50, "latency"), (None, None, "latency")])
def test_the_limiter_is_the_unit_above_sixty_percent(sm: float | None, mem: float | None, expected: str) -> None:
    assert ncu.limiter(sm, mem) == expected


def test_ncu_failures_become_one_sentence_with_the_remedy() -> None:
    perm = "==ERROR== ERR_NVGPUCTRPERM - The user does not have permission to access NVIDIA GPU Performance Counters"
    assert ncu.explain_failure(perm, 1, "ncu") == tools.COUNTERS_REMEDY
    assert "NVreg_RestrictProfilingToAdminUsers=0" in tools.COUNTERS_REMEDY and "--trace" in tools.COUNTERS_REMEDY
    unsupported = "==ERROR== Device 0 is not supported by this version of Nsight Compute"
    assert "does not support this GPU" in ncu.explain_failure(unsupported, 1, "/opt/ncu")
    assert ncu.explain_failure("==ERROR== something else\n", 1, "ncu") == "ncu failed: something else"
    assert ncu.explain_failure("last words\n", 3, "ncu") == "ncu exited with code 3: last words."


def test_shapes_and_implementations_are_chosen_from_the_op() -> None:
    spec = parse_spec(KERNELS / "softmax" / "op.toml")
    assert calls.choose_shape(spec, None) == spec.bench_shapes[0]
    assert calls.choose_shape(spec, "1") == spec.bench_shapes[1]
    assert calls.choose_shape(spec, "rows=8,cols=128") == {"rows": 8, "cols": 128}
    with pytest.raises(ConfigError, match=f"has {len(spec.bench_shapes)} bench shapes"):
        calls.choose_shape(spec, str(len(spec.bench_shapes)))
    with pytest.raises(ConfigError, match="the keys cols, rows"):
        calls.choose_shape(spec, "n=8")
    with pytest.raises(ConfigError, match="k=v,k=v or ROWSxCOLS with integers"):
        calls.choose_shape(spec, "rows=big")
    # The sizes in the order of the op's keys, as file names and summaries write a shape.
    assert calls.choose_shape(spec, "4096x1024") == {"rows": 4096, "cols": 1024}
    assert calls.choose_shape(spec, "8X128") == {"rows": 8, "cols": 128}
    assert list(calls.choose_shape(spec, "cols=128, rows=8")) == ["rows", "cols"]  # the file name's order
    assert calls.choose_shape(spec, " 1 ") == spec.bench_shapes[1]
    matmul = parse_spec(KERNELS / "matmul" / "op.toml")
    assert list(calls.choose_shape(matmul, "64x32x16").values()) == [64, 32, 16]
    with pytest.raises(ConfigError, match=r"softmax's shapes have 2 sizes \(ROWSxCOLS\)"):
        calls.choose_shape(spec, "4096x1024x3")
    with pytest.raises(ConfigError, match="every size must be at least 1"):
        calls.choose_shape(spec, "0x1024")
    with pytest.raises(ConfigError, match="ROWSxCOLS with integers"):
        calls.choose_shape(spec, "4096xbig")
    assert calls.choose_impls(spec, None) == [("kernellab", "candidate"), ("eager", "baseline"),
                                                ("compile", "baseline")]
    assert calls.choose_impls(spec, ["eager"]) == [("eager", "baseline")]
    with pytest.raises(ConfigError, match="--impl sdpa: softmax has kernellab, eager, compile"):
        calls.choose_impls(spec, ["sdpa"])
    assert calls.file_stem(spec, {"rows": 4096, "cols": 1024}, "float16", "eager") == "softmax-4096x1024-float16-eager"


def test_a_backward_profile_leaves_out_the_candidates_without_a_backward_and_refuses_one_named() -> None:
    spec = parse_spec(KERNELS / "layernorm" / "op.toml")
    spec = dataclasses.replace(spec, candidates={**spec.candidates, "forward_only": "layernorm_fwd_only"})
    assert ("forward_only", "candidate") in calls.choose_impls(spec, None)
    for which in ("backward", "full"):
        assert [n for n, _ in calls.choose_impls(spec, None, which=which)] == ["kernellab", "eager", "compile"]
        with pytest.raises(ConfigError, match="--impl forward_only: layernorm's candidate forward_only has no "
                                              r"backward \(op.toml's \[backward\] candidates: kernellab\)"):
            calls.choose_impls(spec, ["eager", "forward_only"], which=which)


def test_only_a_backward_or_full_pass_turns_autograds_thread_off_and_says_when_torch_cannot(
        monkeypatch: pytest.MonkeyPatch) -> None:
    torch = pytest.importorskip("torch")
    with calls.on_this_thread("backward"):
        assert not torch.autograd.is_multithreading_enabled()
    assert torch.autograd.is_multithreading_enabled()
    monkeypatch.delattr(torch.autograd, "set_multithreading_enabled")
    with calls.on_this_thread("forward"):  # a forward needs no switch: torch 1.13 images profile it
        pass
    with pytest.raises(ProfileError, match="profiling a full pass needs torch 2.0 or later"):
        calls.on_this_thread("full")


def test_the_summary_puts_candidate_and_baselines_side_by_side() -> None:
    kernel = ncu.summarize(ncu.parse_raw_csv((DATA / "ncu-raw-softmax-h100.csv").read_text())[0])
    doc = {"op": "softmax", "shape": {"rows": 4096, "cols": 4096}, "dtype": "float32", "gpu": "H100", "mode": "ncu",
           "set": "basic", "warmup_calls": 3, "seconds": 30.0, "ncu": {"version": "2025.3"},
           "impls": {"kernellab": {"role": "candidate", "kernels": [kernel]},
                     "eager": {"role": "baseline", "kernels": [dict(kernel, kernel="cunn_SoftMaxForward")]}}}
    text = report.to_markdown(doc)
    assert "| kernellab (candidate) | `softmax_kernel` | 41.2 µs | 81.3 | 83.1 | 47.1 | 2725 | 89.8 / 100.0 % | 32 " \
           "| 256 B | – | memory (L2) | long_scoreboard 12.6" in text
    assert "| eager (baseline) | `cunn_SoftMaxForward` |" in text
    assert "2 kernels profiled in 30.0 s (15.0 s per kernel" in text
    long = "triton_red_fused__softmax_backward_data_native_layer_norm_backward_{}"  # torch.compile's, cut by timeline.short
    compiled = {"role": "baseline", "kernels": [dict(kernel, kernel=long.format(i)) for i in (0, 2)]}
    text = report.to_markdown(dict(doc, impls={"compile": compiled}))
    assert "_backward_0` |" in text and "_backward_2` |" in text   # a long name keeps its end


# --------------------------------------------------------------------------- compute-sanitizer's output


def test_memcheck_names_kernel_line_and_case_and_not_the_process_dying() -> None:
    errors, failed = sanitize.parse("memcheck", (DATA / "sanitizer-memcheck-h100.log").read_text())
    assert failed == [] and len(errors) == 1
    e = errors[0]
    assert e.message == "Invalid __global__ write of size 4 bytes"
    assert e.kernel == "<unnamed>::oob_write_kernel(const float *, float *, long)"
    assert e.where == "oob_write.cu:8" and e.case == "kernellab n=1001 float32 seed=0"
    assert any("out of bounds" in d for d in e.details)
    text = (DATA / "sanitizer-memcheck-h100.log").read_text()
    assert sanitize.cases_run(text) == ["kernellab n=1001 float32 seed=0"]  # the process died there: no closing count
    lines = sanitize.report("memcheck", errors, failed, len(sanitize.cases_run(text)), sanitize.ERROR_EXIT, died=True,
                            finished=False)
    assert lines[0] == "memcheck: 1 error at 1 place (1 case)"  # the case it names below counts
    assert "kernel <unnamed>::oob_write_kernel(const float *, float *, long) at oob_write.cu:8; " \
           "case kernellab n=1001 float32 seed=0" in lines[2]
    assert "CUDA context is lost" in lines[3]


def test_racecheck_merges_one_race_met_in_two_cases_and_keeps_the_failed_checks() -> None:
    errors, failed = sanitize.parse("racecheck", (DATA / "sanitizer-racecheck-h100.log").read_text())
    assert len(errors) == 2 and len(failed) == 2
    assert errors[0].message == "Error: Race reported between Write access"
    assert errors[0].where == "shared_race.cu:10 and shared_race.cu:12"  # the write, then the read
    assert errors[0].kernel == "<unnamed>::shared_race_kernel(const float *, float *)"
    groups = sanitize.merged(errors)
    assert len(groups) == 1 and groups[0][1] == ["kernellab n=1024 float32 seed=0", "kernellab n=65536 float32 seed=0"]
    assert len(sanitize.cases_run((DATA / "sanitizer-racecheck-h100.log").read_text())) == 2
    lines = sanitize.report("racecheck", errors, failed, 2, sanitize.ERROR_EXIT)
    assert lines[0] == "racecheck: 2 errors at 1 place (2 cases)"
    assert sum(line.startswith("  check failed: kernellab n=") for line in lines) == 2


def test_a_clean_run_and_a_run_that_broke_read_differently() -> None:
    clean = "========= COMPUTE-SANITIZER\nkernellab-case: a n=1 float32 seed=0\nkernellab-cases: 1\n" \
            "========= ERROR SUMMARY: 0 errors\n"
    errors, failed = sanitize.parse("initcheck", clean)
    assert errors == [] and failed == []
    assert sanitize.report("initcheck", errors, failed, 1, 0) == ["initcheck: clean (1 case)"]
    assert "did not finish" in sanitize.report("synccheck", [], [], 0, 139)[0]
    assert "did not finish" in sanitize.report("synccheck", [], [], 1, 0, finished=False)[0]  # not "clean"


def _sanitize_prints(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
                     output: str, code: int) -> tuple[int, str]:
    """What the task prints for one memcheck pass whose compute-sanitizer printed `output` and exited `code`."""
    monkeypatch.setenv("KERNELLAB_CACHE", str(tmp_path))
    monkeypatch.setattr(proc, "run", lambda argv, **kw: proc.Result(list(argv), code, output, ""))
    status = sanitize._each_tool("oob_write", ["memcheck"], Path("compute-sanitizer"), ["python", "x"], {})
    return status, capsys.readouterr().out


@pytest.mark.parametrize("code", [sanitize.ERROR_EXIT, 134])  # 134: a tool that passes on the child's abort
def test_the_task_prints_the_memcheck_summary_once_counting_the_case_it_names(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], code: int) -> None:
    log = (DATA / "sanitizer-memcheck-h100.log").read_text()
    status, out = _sanitize_prints(tmp_path, monkeypatch, capsys, log, code)
    assert status == 1
    assert out.count("memcheck: ") == 1 and "memcheck: 1 error at 1 place (1 case)\n" in out
    assert out.count("Invalid __global__ write of size 4 bytes") == 1  # not the tool's own block again
    assert out.count("case kernellab n=1001 float32 seed=0") == 1
    assert "ERROR SUMMARY" not in out and "frame #" not in out and "terminate called" not in out
    assert out.count("compute-sanitizer's full output:") == 1
    assert (tmp_path / "sanitize" / "oob_write-memcheck.log").read_text() == log


def test_the_task_shows_the_tools_output_only_when_there_is_no_error_to_report(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    clean = "========= COMPUTE-SANITIZER\nkernellab-case: a n=1 float32 seed=0\nkernellab-case: a n=2 float32 seed=0\n" \
            "kernellab-cases: 2\n========= ERROR SUMMARY: 0 errors\n"
    status, out = _sanitize_prints(tmp_path, monkeypatch, capsys, clean, 0)
    assert status == 0 and "memcheck: clean (2 cases)\n" in out and "COMPUTE-SANITIZER" not in out
    died = "========= COMPUTE-SANITIZER\nkernellab-case: a n=1 float32 seed=0\nSegmentation fault\n" \
           "========= ERROR SUMMARY: 0 errors\n"
    status, out = _sanitize_prints(tmp_path, monkeypatch, capsys, died, 0)
    assert status == 1 and "Segmentation fault" in out  # nothing else would say why
    assert "did not finish" in out and "clean" not in out


def test_sanitizer_command_line() -> None:
    argv = sanitize.sanitizer_argv("/cuda/bin/compute-sanitizer", "racecheck", ["python", "x"])
    assert argv[:3] == ["/cuda/bin/compute-sanitizer", "--tool", "racecheck"]
    assert "--error-exitcode" in argv and "--report-api-errors" in argv and argv[-2:] == ["python", "x"]
    with pytest.raises(ConfigError, match="unknown --tool 'leakcheck'"):
        sanitize.sanitizer_argv("cs", "leakcheck", [])


# --------------------------------------------------------------------------- where the tools are; counters


def test_counters_restricted_reads_the_driver_params() -> None:
    assert tools.counters_restricted("EnableMSI: 1\nRmProfilingAdminOnly: 1\n") is True
    assert tools.counters_restricted("RmProfilingAdminOnly: 0\n") is False
    assert tools.counters_restricted("EnableMSI: 1\n") is None and tools.counters_restricted(None) is None


@pytest.mark.parametrize("params, uid, ncu, severity, words", [
    ("RmProfilingAdminOnly: 1\n", 1000, "/opt/ncu", "warn", "restricted to admins"),
    ("RmProfilingAdminOnly: 1\n", 0, "/opt/ncu", "ok", "but this is root"),
    ("RmProfilingAdminOnly: 0\n", 1000, "/opt/ncu", "ok", "open to all users"),
    (None, 1000, "/opt/ncu", "ok", "unknown"),
    ("RmProfilingAdminOnly: 0\n", 1000, None, "warn", "no ncu on this machine"),
])
def test_doctor_profiling_readiness(tmp_path: Path, params: str | None, uid: int, ncu: str | None, severity: str,
                                    words: str) -> None:
    path = tmp_path / "params"
    if params is not None:
        path.write_text(params)
    r = tools.readiness(Path(ncu) if ncu else None, tools.read_params(path), uid, has_gpu=True)
    assert r.severity == severity and words in r.message
    if severity == "warn" and params and "1" in params:
        assert r.remedy == tools.COUNTERS_REMEDY
    assert tools.readiness(None, params, uid, has_gpu=False).severity == "info"


def test_tools_are_found_by_override_then_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    tool = tmp_path / "bin" / "ncu"
    tool.parent.mkdir()
    tool.write_text("#!/bin/sh\n")
    tool.chmod(tool.stat().st_mode | stat.S_IXUSR)
    monkeypatch.delenv("KERNELLAB_NCU", raising=False)
    monkeypatch.setenv("PATH", str(tool.parent))
    assert tools.find("ncu") == tool
    monkeypatch.setenv("KERNELLAB_NCU", str(tmp_path / "missing"))
    assert tools.find("ncu") is None  # a wrong override is not silently replaced by another ncu
    monkeypatch.setenv("KERNELLAB_NCU", str(tool))
    assert tools.find("ncu") == tool
    assert tools.install_folder(tool) == tool.parent


def test_a_container_gets_the_hosts_nsight_compute_read_only_and_no_extra_privilege(tmp_path: Path) -> None:
    from fake_engine import fake, image
    from kernellab.container import runner

    ncu_dir = tmp_path / "nsight-compute" / "2025.3.1"
    argv = runner.run_argv("img:1", ["python", "-m", "kernellab.nsight.profile"], user=(1000, 1000), repo=tmp_path,
                               cache=tmp_path, mounts=[f"{ncu_dir}:{tools.HOST_NCU}:ro"],
                               engine=fake("docker", {"img:1": image()}))
    assert f"{ncu_dir}:/opt/kernellab/host-nsight-compute:ro" in argv
    assert argv[argv.index("--user") + 1] == "1000:1000"
    assert "--privileged" not in argv and not any(a.startswith("--cap-add") for a in argv)
    assert f"{tools.HOST_NCU}/ncu" in tools.TOOLS["ncu"].folders  # found there when the image has none


def test_the_task_answers_a_bad_shape_or_dtype_before_anything_runs() -> None:
    from invoke import Exit

    from kernellab.cli import profile as task_module
    from places_fixtures import RecordingPlace, context

    place = RecordingPlace()
    with pytest.raises(Exit, match=r"--shape '4096xbig': give an index into the bench shapes") as e:
        task_module.profile.body(context(place), k="softmax", shape="4096xbig")
    assert e.value.code == 2
    with pytest.raises(Exit, match="--dtype float64: softmax supports float32, float16, bfloat16"):
        task_module.profile.body(context(place), k="softmax", dtype="float64")
    assert place.jobs == []  # nothing started
    task_module.profile.body(context(place), k="softmax", shape="4096x1024", dtype="float16")
    argv = place.job.argv
    assert argv[argv.index("--shape") + 1] == "4096x1024" and argv[argv.index("--dtype") + 1] == "float16"
    for other in ({"trace": True}, {"timeline": True}):
        with pytest.raises(Exit, match="--clocks compares Nsight Compute's runs|--clocks is for Nsight Compute"):
            task_module.profile.body(context(place), k="softmax", clocks=True, **other)
    task_module.profile.body(context(place), k="softmax", clocks=True)
    assert len(place.jobs) == 2 and "--clocks" in place.jobs[-1].argv  # the refused ones started nothing
