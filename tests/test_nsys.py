"""Nsight Systems timelines: the reader, the analysis, the tool registry, and real captures with Debian's nsys.

The `nsys` tests capture a CPU program with NVTX ranges (tests/data/nvtx_phases.c, compiled here against the NVTX
headers nsys ships) with the nsys `make test-tools` unpacks from Debian's archive: natively, and in the default image
with the host's nsys mounted read-only as `invoke profile --timeline` mounts it. The GPU half (kernels of an op and of
a published system) runs on the GPU machine (tests/test_profile_gpu.py, .ci/gpu-host.sh timeline).
"""
from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from kernellab import ROOT, jobs
from kernellab.errors import ProfileError
from kernellab.nsight import nsys, timeline, tools
from kernellab.nsight.nsys import Capture, Copy, Kernel, Range

PROGRAM = ROOT / "tests" / "data" / "nvtx_phases.c"
SECRET = "planted-secret-7f3a"


def K(name: str, start: int, end: int, launched: int | None = None, thread: int | None = 1) -> Kernel:
    return Kernel(name, start, end, 7, launched, thread)


# --------------------------------------------------------------------------- the analysis, on made-up captures


def test_a_kernel_belongs_to_the_range_its_launch_ran_in_on_the_same_thread() -> None:
    rng = Range("call", 100, 200, 1, "push/pop")
    late = K("late", 250, 300, launched=190)          # runs after the range closed, launched inside it
    other_thread = K("other", 150, 160, launched=150, thread=2)
    before = K("before", 120, 130, launched=90)
    assert timeline.within([late, other_thread, before], rng) == [late]


def test_busy_and_idle_count_overlapping_kernels_once() -> None:
    ks = [K("a", 0, 10), K("b", 5, 20), K("c", 30, 40)]
    assert timeline.busy_ns(ks) == 30
    assert timeline.idle_ns(ks) == 10                  # 20..30
    assert timeline.idle_ns([]) == 0


def test_kernel_rows_rank_by_gpu_time_with_launches_per_call_and_share() -> None:
    rows = timeline.kernel_rows([K("gemm", 0, 30), K("gemm", 40, 70), K("softmax", 80, 100)], calls=2)
    assert [r["kernel"] for r in rows] == ["gemm", "softmax"]
    assert rows[0]["launches"] == 2 and rows[0]["per_call"] == 1 and rows[0]["per_call_ns"] == 30
    assert rows[0]["share"] == pytest.approx(60 / 80)


def test_calls_of_an_implementation_are_the_call_ranges_inside_its_own() -> None:
    ranges = [Range("mine", 0, 1000, 1, "push/pop"), Range("call", 10, 100, 1, "push/pop"),
              Range("call", 200, 400, 1, "push/pop"), Range("theirs", 2000, 3000, 1, "push/pop"),
              Range("call", 2100, 2200, 1, "push/pop")]
    kernels = [K("k1", 20, 60, launched=15), K("k2", 70, 90, launched=16), K("k1", 210, 300, launched=205),
               K("x", 2110, 2150, launched=2105)]
    cap = Capture("3.7.2", "2023.4.4", kernels, ranges, [Copy("memcpy HtoD", 64, 30, 40)])
    mine = timeline.calls_of(cap, "mine")
    assert len(mine.calls) == 2 and [len(k) for k in mine.kernels] == [2, 1]
    s = mine.summary()
    assert s["calls"] == 2 and s["kernels_per_call"] == 1.5
    assert s["gpu_us_per_call"] == pytest.approx((40 + 20 + 90) / 2 / 1e3)
    assert s["copies_per_call"] == 0.5 and s["copy_bytes_per_call"] == 32
    assert s["first_kernel_us"] == pytest.approx(((20 - 10) + (210 - 200)) / 2 / 1e3)  # call start to its first kernel
    assert mine.median_call() == 1                     # 200 ns of wall time against 90
    assert [k.name for k in timeline.calls_of(cap, "theirs").kernels[0]] == ["x"]


def test_the_pictured_call_is_the_one_of_median_wall_time_not_of_median_gpu_time() -> None:
    # Three calls: GPU time 10, 50, 30 ns; wall time 100, 60, 500 (the last one's host stalled). By GPU time the
    # median is the stalled call; by wall time it is the first, 100 ns, which is what a typical call looks like.
    ranges = [Range("mine", 0, 10_000, 1, "push/pop"), Range("call", 0, 100, 1, "push/pop"),
              Range("call", 1000, 1060, 1, "push/pop"), Range("call", 2000, 2500, 1, "push/pop")]
    kernels = [K("k", 10, 20, launched=5), K("k", 1005, 1055, launched=1001), K("k", 2460, 2490, launched=2001)]
    mine = timeline.calls_of(Capture("3.7.2", "2023.4.4", kernels, ranges, []), "mine")
    assert [sum(k.ns for k in ks) for ks in mine.kernels] == [10, 50, 30]
    assert mine.median_call() == 0


def test_a_long_kernel_name_keeps_its_start_and_its_end() -> None:
    a, b = (f"triton_red_fused_native_layer_norm_native_layer_norm_backward_{i}" for i in (0, 2))
    assert timeline.short(a, 50) != timeline.short(b, 50)
    assert len(timeline.short(a, 50)) == 50 and timeline.short(a, 50).endswith("_backward_0")
    assert timeline.short("call", 24) == "call" and len(timeline.short("x" * 30, 6)) == 6


def test_every_kernel_named_in_a_picture_has_a_colour_of_its_own() -> None:
    import colorsys

    from matplotlib.colors import to_rgba

    names = [f"kernel_{i}" for i in range(timeline.NAMED + 3)]
    colour = timeline.colours(names)
    named = [to_rgba(colour[n]) for n in names[:timeline.NAMED]]
    assert len(set(named)) == timeline.NAMED                    # 11 kernels once shared tab10's colours
    assert to_rgba(timeline.OTHER) not in named
    assert {colour[n] for n in names[timeline.NAMED:]} == {timeline.OTHER}
    # the two that take the most time: different hues (tab20's dark shades first), not a dark and a light blue
    hues = [colorsys.rgb_to_hsv(*rgba[:3])[0] for rgba in named[:2]]
    assert abs(hues[0] - hues[1]) > 0.05
    entries = timeline.legend(names, colour)
    assert len(entries) == timeline.NAMED + 1 and entries[-1] == ("3 other kernels", timeline.OTHER)
    assert [label for label, _ in entries[:2]] == ["kernel_0", "kernel_1"]


def test_the_picture_is_a_png_with_ranges_and_kernels(tmp_path: Path) -> None:
    lanes = [timeline.Lane("mine", [Range("call", 0, 5000, 1, "push/pop")], [K("k", 100, 3000), K("j", 3100, 4000)], 0),
             timeline.Lane("empty", [], [], 0)]
    path = timeline.picture(tmp_path / "t.png", lanes, "title")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and path.stat().st_size > 5000
    many = [timeline.Lane("many", [], [K(f"k{i}", 100 * i, 100 * i + 50) for i in range(timeline.NAMED + 4)], 0)]
    assert timeline.picture(tmp_path / "many.png", many, "title").stat().st_size > 5000  # 24 kernels


# --------------------------------------------------------------------------- the reader, on an export-shaped database


def _export(path: Path, schema: str = "3.7.2") -> Path:
    con = sqlite3.connect(path)
    con.executescript("""
        CREATE TABLE META_DATA_EXPORT (name TEXT, value TEXT);
        CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT);
        CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INTEGER, end INTEGER, streamId INTEGER, correlationId INTEGER,
            shortName INTEGER, demangledName INTEGER);
        CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME (start INTEGER, end INTEGER, globalTid INTEGER, correlationId INTEGER,
            nameId INTEGER);
        CREATE TABLE CUPTI_ACTIVITY_KIND_MEMCPY (start INTEGER, end INTEGER, bytes INTEGER, copyKind INTEGER);
        CREATE TABLE NVTX_EVENTS (start INTEGER, end INTEGER, eventType INTEGER, text TEXT, textId INTEGER,
            globalTid INTEGER, domainId INTEGER);
        INSERT INTO StringIds VALUES (1, 'softmax_kernel'), (2, 'void softmax_kernel<float>(float*)'), (3, 'call');
        INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (500, 900, 7, 11, 1, 2);
        INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (450, 470, 42, 11, 0);
        INSERT INTO CUPTI_ACTIVITY_KIND_MEMCPY VALUES (100, 200, 4096, 1);
        INSERT INTO NVTX_EVENTS VALUES (400, 950, 59, NULL, 3, 42, 0), (10, NULL, 75, 'paper', NULL, 42, 5),
            (20, 30, 60, 'phase', NULL, 42, 5), (40, NULL, 34, 'mark', NULL, 42, 0);
    """)
    con.executemany("INSERT INTO META_DATA_EXPORT VALUES (?, ?)",
                    [("EXPORT_SCHEMA_VERSION", schema), ("EXPORT_PRODUCT_VERSION", "2023.4.4.54")])
    con.commit()
    con.close()
    return path


def test_the_reader_takes_kernels_their_launches_ranges_and_copies_from_the_export(tmp_path: Path) -> None:
    cap = nsys.read(_export(tmp_path / "r.sqlite"))
    assert cap.schema == "3.7.2" and cap.nsys_version == "2023.4.4.54"
    assert cap.kernels == [Kernel("softmax_kernel", 500, 900, 7, 450, 42)]
    assert cap.ranges == [Range("paper:phase", 20, 30, 42, "start/end"), Range("call", 400, 950, 42, "push/pop")]
    assert cap.copies == [Copy("memcpy HtoD", 4096, 100, 200)]
    assert timeline.within(cap.kernels, cap.ranges[1]) == cap.kernels


def test_an_export_of_a_schema_it_does_not_know_or_no_export_at_all_is_one_sentence(tmp_path: Path) -> None:
    with pytest.raises(ProfileError, match=r"export schema 9\.0\.1; kernellab reads schema 2\.x or 3\.x"):
        nsys.read(_export(tmp_path / "new.sqlite", schema="9.0.1"))
    junk = tmp_path / "junk.sqlite"
    junk.write_text("not a database")
    with pytest.raises(ProfileError, match="not a readable nsys export"):
        nsys.read(junk)


# --------------------------------------------------------------------------- command lines, environment, registry


def test_a_capture_runs_with_only_the_environment_a_program_needs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET)
    monkeypatch.setenv("GITHUB_TOKEN", SECRET)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    monkeypatch.setenv("KERNELLAB_CACHE", "/tmp/klc")
    argv = nsys.capture_argv(Path("/opt/nsys/bin/nsys"), Path("/tmp/out/x.nsys-rep"), ["python", "prog.py"],
                             profiler_range=True, seconds=30)
    assert argv[:2] == ["env", "-i"] and SECRET not in " ".join(argv)
    assert "CUDA_VISIBLE_DEVICES=1" in argv and "KERNELLAB_CACHE=/tmp/klc" in argv
    i = argv.index("/opt/nsys/bin/nsys")
    assert argv[i:i + 4] == ["/opt/nsys/bin/nsys", "profile", "--trace", "cuda,nvtx"]
    assert argv[argv.index("--sample") + 1] == "none" and argv[argv.index("--cpuctxsw") + 1] == "none"
    assert argv[argv.index("--capture-range") + 1] == "cudaProfilerApi"
    assert argv[argv.index("--duration") + 1] == "30" and argv[argv.index("--output") + 1] == "/tmp/out/x"
    assert argv[-2:] == ["python", "prog.py"]


def test_nsys_installs_mount_the_folder_that_holds_cli_and_importer(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    prefix = tmp_path / "nsight-systems" / "2023.4.4"
    (prefix / "bin").mkdir(parents=True)
    (prefix / "target-linux-x64").mkdir()
    exe = prefix / "target-linux-x64" / "nsys"
    exe.write_text("#!/bin/sh\n")
    exe.chmod(0o755)
    (prefix / "bin" / "nsys").symlink_to("../target-linux-x64/nsys")
    assert tools.install_folder(prefix / "bin" / "nsys") == prefix
    ncu_style = tmp_path / "nsight-compute" / "2025.3.1" / "host" / "target-linux-x64"
    ncu_style.mkdir(parents=True)
    (ncu_style / "nsys").write_text("")
    assert tools.install_folder(ncu_style / "nsys") == ncu_style.parent
    monkeypatch.setenv("KERNELLAB_NSYS", str(prefix / "bin" / "nsys"))
    monkeypatch.setenv("KERNELLAB_NCU", str(tmp_path / "missing-ncu"))
    assert tools.mounts(("ncu", "nsys")) == [f"{prefix}:{tools.HOST_NSYS}:ro"]
    assert f"{tools.HOST_NSYS}/bin/nsys" in tools.TOOLS["nsys"].folders      # found there in a container


def test_profile_timeline_is_a_job_of_its_own_that_borrows_the_hosts_nsys() -> None:
    job = jobs.profile("softmax", timeline=True, calls=5, seconds=60, impl=["kernellab"], system='{"name": "x"}')
    assert job.argv[:4] == ("python", "-m", "kernellab.nsight.op_timeline", "-k")
    assert "--calls" in job.argv and "5" in job.argv and "--seconds" in job.argv and "--system" in job.argv
    assert job.tools == ("nsys",) and job.results == "--out"
    assert jobs.profile("softmax").tools == ("ncu",)
    assert "--pass" not in job.argv  # the forward, the default
    back = jobs.profile("layernorm", timeline=True, which="backward")
    assert back.argv[back.argv.index("--pass") + 1] == "backward"


def test_a_backward_timeline_says_which_pass_it_captured() -> None:
    from kernellab.nsight import op_timeline

    rows = [{"kernel": "layernorm_backward_kernel", "launches": 4, "per_call": 1, "per_call_ns": 40_000,
             "total_ns": 160_000, "mean_ns": 40_000, "share": 0.95}]
    summary = {"role": "candidate", "calls": 4, "kernels_per_call": 2, "gpu_us_per_call": 42.0, "idle_us_per_call": 1.5,
               "first_kernel_us": 9.0, "call_us": 60.0, "copies_per_call": 0, "kernels": rows}
    doc = {"op": "layernorm", "shape": {"rows": 16384, "cols": 1024}, "dtype": "float16", "gpu": "H200",
           "which": "backward", "nsys": {"version": "2025.3.1", "schema": "3.15"}, "warmup_calls": 3, "calls": 4,
           "report": "r.nsys-rep", "seconds_limit": None, "impls": {"kernellab": summary}}
    text = op_timeline.markdown(doc)
    assert text.startswith("# Timeline: layernorm (rows=16384, cols=1024, float16, backward) on H200\n")
    assert ("each after an L2 flush, the GPU synchronised after each, through autograd as the bench times them (each "
            "backward's forward run before the flush, outside the call). ") in text
    assert "| kernellab (candidate) | 2 | 42.0 µs |" in text and "`layernorm_backward_kernel`" in text
    full = op_timeline.markdown(dict(doc, which="full"))
    assert "float16, full pass) on H200" in full and "through autograd as the bench times them. " in full
    forward = op_timeline.markdown({k: v for k, v in doc.items() if k != "which"})  # a timeline.json of before --pass
    assert "(rows=16384, cols=1024, float16) on H200" in forward and "autograd" not in forward


def test_an_importer_that_is_missing_or_cannot_start_is_one_sentence(tmp_path: Path) -> None:
    prefix = tmp_path / "p"
    (prefix / "target-linux-x64").mkdir(parents=True)
    (prefix / "host-linux-x64").mkdir()
    exe = prefix / "target-linux-x64" / "nsys"
    exe.write_text("#!/bin/sh\n")
    exe.chmod(0o755)
    assert "no report importer (QdstrmImporter)" in (nsys.importer_works(exe) or "")
    imp = prefix / "host-linux-x64" / "QdstrmImporter"
    imp.write_text("#!/bin/sh\necho './QdstrmImporter: error while loading shared libraries: libdw.so.1: cannot open' >&2\n"
                   "exit 127\n")
    imp.chmod(0o755)
    assert "it needs libdw.so.1, which this machine lacks" in (nsys.importer_works(exe) or "")


def test_an_nsys_older_than_the_programs_cuda_is_refused_and_a_new_enough_one_is_not() -> None:
    from kernellab.image import nsys as facts  # the one reader of an nsys version's release line

    assert facts.line("2023.4.4.54~12.4.1-2") == (2023, 4) and facts.line("2025.3.1.90-253135822126v0") == (2025, 3)
    sentence = nsys.too_old("2023.4.4.54~12.4.1-2", "13.0")
    assert sentence and "traces CUDA up to 12.4" in sentence and "silently drops" in sentence
    assert nsys.too_old("2023.4.4.54~12.4.1-2", "12.4") is None
    assert nsys.too_old("2025.3.1.90-253135822126v0", "13.0") is None
    assert nsys.too_old("2023.4.4.54", None) is None      # a CPU program


# --------------------------------------------------------------------------- real captures with Debian's nsys


def _compiled(nsys_exe: Path, out: Path) -> Path:
    include = nsys.importer(nsys_exe).parent.parent / "target-linux-x64" / "nvtx" / "include"  # type: ignore[union-attr]
    binary = out / "nvtx_phases"
    subprocess.run(["cc", "-O1", f"-I{include}", str(PROGRAM), "-ldl", "-o", str(binary)], check=True)
    return binary


@pytest.mark.nsys
def test_debians_nsys_records_every_nvtx_range_of_a_cpu_program_and_none_of_the_callers_secrets(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    exe = tools.find("nsys")
    assert exe is not None
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET)
    program = _compiled(exe, tmp_path)
    stale = tmp_path / "run.sqlite"
    stale.write_text("an export of another capture")         # never read: the export is made afresh
    rep = nsys.capture(exe, tmp_path / "run.nsys-rep", [str(program)], cuda=False)
    db = nsys.export(exe, rep)
    cap = nsys.read(db)
    assert cap.schema.startswith("3.") and cap.kernels == []
    assert [(r.name, r.kind) for r in cap.ranges] == [("load", "push/pop"), ("parse", "push/pop"),
                                                     ("solve", "start/end"), ("paper:report", "push/pop")]
    load, parse = cap.ranges[0], cap.ranges[1]
    assert load.start <= parse.start and parse.end <= load.end and 15e6 < load.ns < 1e9
    rows = {r["range"]: r for r in timeline.nvtx_rows(cap)}
    assert rows["solve"]["instances"] == 1 and rows["solve"]["kernels"] == 0
    assert SECRET.encode() not in db.read_bytes()


@pytest.mark.nsys
def test_a_capture_without_kernels_where_the_bench_expects_some_is_refused_not_summarised(tmp_path: Path) -> None:
    from kernellab.nsight import op_timeline

    exe = tools.find("nsys")
    assert exe is not None
    rep = nsys.capture(exe, tmp_path / "k.nsys-rep", [str(_compiled(exe, tmp_path))], cuda=False)
    cap = nsys.read(nsys.export(exe, rep))
    version = nsys.version(exe) or "?"
    with pytest.raises(ProfileError, match="recorded no kernel at all.*loses kernels silently"):
        op_timeline._summarise(cap, [("kernellab", "candidate")], 10, version, "13.0")


@pytest.mark.nsys
def test_an_nsys_whose_importer_is_gone_leaves_a_qdstrm_and_says_why(tmp_path: Path) -> None:
    exe = tools.find("nsys")
    assert exe is not None
    prefix = tools.install_folder(exe)
    broken = tmp_path / "nsys-without-importer"
    shutil.copytree(prefix, broken, symlinks=True,
                    ignore=lambda d, names: [n for n in names if n == "QdstrmImporter"])
    with pytest.raises(ProfileError, match=r"left only a \.qdstrm.*no report importer"):
        nsys.capture(broken / "bin" / "nsys", tmp_path / "x.nsys-rep", [str(_compiled(exe, tmp_path))], cuda=False)


@pytest.mark.nsys
@pytest.mark.docker
def test_the_hosts_nsys_mounted_into_the_default_image_traces_a_program_there_as_the_caller(
        default_image: str, tmp_path: Path) -> None:
    """The path `invoke profile --timeline` takes in an image without nsys: the host's, mounted read-only."""
    from kernellab.places import Container

    out = ROOT / "results" / "_scratch" / f"nsys-{os.getpid()}"
    out.mkdir(parents=True, exist_ok=True)
    try:
        script = (f"cc -O1 -I{tools.HOST_NSYS}/target-linux-x64/nvtx/include tests/data/nvtx_phases.c -ldl "
                  f"-o $KERNELLAB_OUT/p && python -c \"from pathlib import Path; from kernellab.nsight import nsys, tools;"
                  f"e = tools.find('nsys'); r = nsys.capture(e, Path('$KERNELLAB_OUT/c.nsys-rep'), ['$KERNELLAB_OUT/p'], "
                  f"cuda=False); print(e, [x.name for x in nsys.read(nsys.export(e, r)).ranges])\" && id -u")
        job = jobs.Job("shell", ("bash", "-c", script), gpu=False, tools=("nsys",), scratch=out,
                       output=tmp_path / "log.txt")
        code = Container(default_image, gpu_mode=False).run(job)
        log = (tmp_path / "log.txt").read_text()
        assert code == 0, log
        assert f"{tools.HOST_NSYS}/bin/nsys ['load', 'parse', 'solve', 'paper:report']" in log
        assert log.strip().splitlines()[-1] == str(os.getuid())
        assert (out / "c.nsys-rep").stat().st_uid == os.getuid()
    finally:
        shutil.rmtree(out, ignore_errors=True)


@pytest.mark.nsys
def test_doctor_says_which_nsys_its_version_what_it_traces_and_that_its_importer_works() -> None:
    exe = tools.find("nsys")
    r = nsys.readiness(exe, has_gpu=True)
    assert r.severity == "ok", r.message
    assert f"at {exe}" in r.message and "report importer works" in r.message and "traces CUDA up to" in r.message
    assert "CPU sampling" in r.message
    missing = nsys.readiness(None, has_gpu=True)
    assert missing.severity == "warn" and "docker/nsight-systems.sh" in missing.remedy


def _timeline(*argv: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    from kernellab import pythonpath

    return subprocess.run([sys.executable, "-m", "kernellab.nsight.op_timeline", *argv], cwd=ROOT, text=True,
                          capture_output=True, env={**os.environ, "PYTHONPATH": pythonpath(), **(env or {})},
                          timeout=300)


@pytest.mark.nsys
def test_profile_timeline_without_nsys_or_without_a_gpu_is_one_sentence(tmp_path: Path) -> None:
    gone = _timeline("-k", "softmax", "--out", str(tmp_path), env={"KERNELLAB_NSYS": str(tmp_path / "no-nsys")})
    assert gone.returncode != 0 and "Traceback" not in gone.stderr
    assert gone.stderr.strip() == ("kernellab: Nsight Systems (nsys) is not installed here and the image has none: "
                                   "install it, set KERNELLAB_NSYS to its path, or build a target that carries it "
                                   "(docs/profile.md).")
    cpu = _timeline("-k", "rmsnorm_cpu", "--out", str(tmp_path))
    assert cpu.stderr.strip() == "kernellab: rmsnorm_cpu is a CPU op: a GPU timeline shows GPU kernels only."
    no_backward = _timeline("-k", "vector_add", "--pass", "backward", "--out", str(tmp_path))
    assert no_backward.stderr.strip() == ("kernellab: --pass backward: vector_add's passes are forward (its op.toml "
                                          "declares no [backward]).")
    try:
        import torch
    except ImportError:
        pytest.skip("no torch on this host")
    if not torch.cuda.is_available():
        no_gpu = _timeline("-k", "softmax", "--out", str(tmp_path))
        assert no_gpu.stderr.strip().startswith("kernellab: no GPU is visible here")
    assert not (tmp_path / "timeline").exists() and not (tmp_path / "timeline.partial").exists()


def test_a_profiled_child_that_refuses_is_named_by_its_own_sentence_not_nsyss_last_words(tmp_path: Path) -> None:
    # A stand-in nsys: it runs the program (the words after `--export none` and the flags after it) and writes no
    # report, then adds a line of its own, as nsys does when its program exits early.
    exe = tmp_path / "nsys"
    exe.write_text("#!/bin/sh\nwhile [ \"$1\" != --cpuctxsw ]; do shift; done; shift 2; \"$@\"\n"
                   "echo 'Generating no report: the application exited before profiling started.'\nexit 1\n")
    exe.chmod(0o755)
    child = ["sh", "-c", "echo 'kernellab: layernorm has no full pass here.' >&2; echo traceback-noise >&2; exit 2"]
    with pytest.raises(ProfileError, match=r"^nsys wrote no report \(exit code 1\): layernorm has no full pass here\.$"):
        nsys.capture(exe, tmp_path / "r.nsys-rep", child)
    with pytest.raises(ProfileError, match=r"exit code 1\): Generating no report: the application exited before "):
        nsys.capture(exe, tmp_path / "r.nsys-rep", ["true"])
