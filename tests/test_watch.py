"""`invoke watch` / `python -m kernellab.watch`: the result screen, op names, exit codes, and (slow) a real
watcher process that rebuilds and rechecks a copied CPU op on every edit.

The container form is tests/test_watch_docker.py.
"""
from __future__ import annotations

import os
import queue
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from invoke import Exit

from kernellab import ROOT
from kernellab.cli import watch as task_module
from kernellab.errors import ConfigError, UsageError
from kernellab.ops import spec
from kernellab.places import in_workspace
from kernellab.watch import screen, serve
from places_fixtures import RecordingPlace, context

OP = "rmsnorm_cpu"
SHAPES = [{"rows": 1, "cols": 1}, {"rows": 17, "cols": 1000}]
DTYPES = ["float32", "float64"]


def _result(status: str = "pass", *, failing: set[tuple[int, str]] = frozenset(), labels: tuple[str, ...] = ("kernellab",),
            **kw: Any) -> screen.RoundResult:
    cases = [screen.CaseResult(label, shape, dtype, seed,
                              "3 of 17000 elements differ (atol 0.0001, rtol 0.0001); first at [0, 5]: got 1.01, expected 1"
                              if (i, dtype) in failing and label == labels[-1] else None)
             for label in labels for i, shape in enumerate(SHAPES) for dtype in DTYPES for seed in (0, 1)]
    args = [screen.ArgResult(label, check) for label in labels for check in ("dtype", "device", "contiguous", "shapes")]
    r = screen.RoundResult(op=OP, trigger=screen.Trigger(changed=[f"{OP}/rmsnorm.cpp"], saved=0.0), status=status,
                          build="rebuilt in 0.8 s", candidates=list(labels), shapes=SHAPES, dtypes=DTYPES,
                          cases=cases, args=args, seconds=1.23)
    for k, v in kw.items():
        setattr(r, k, v)
    return r


# --------------------------------------------------------------------------- the result screen


def test_a_round_says_where_its_time_went() -> None:
    text = screen.render(_result(phases={"start": 0.05, "build": 1.1, "checks": 0.2}))
    assert text.splitlines()[-2] == "  time: start 0.05 s, build 1.10 s, checks 0.20 s"
    assert "time:" not in screen.render(_result()), "no line without figures"


def test_a_passing_round_is_a_table_of_shapes_by_dtypes_and_a_pass_line() -> None:
    text = screen.render(_result())
    lines = text.splitlines()
    assert lines[0] == f"{OP}: rebuilt in 0.8 s"
    assert re.match(r"^  shape +float32 +float64$", lines[1])
    assert re.match(r"^  rows=1 cols=1 +pass +pass$", lines[2]) and re.match(r"^  rows=17 cols=1000 +pass +pass$", lines[3])
    assert "argument checks: pass (dtype, device, contiguous, shapes)" in text
    assert lines[-1] == f"PASS {OP}: 8 cases and 4 argument checks pass; 1.2 s from save to result"
    assert "\033" not in text, "plain text when stdout is not a terminal"


def test_a_failing_round_marks_the_cell_and_shows_the_first_mismatch() -> None:
    text = screen.render(_result("fail", failing={(1, "float32")}))
    assert re.search(r"^  rows=1 cols=1 +pass +pass$", text, re.M)
    assert re.search(r"^  rows=17 cols=1000 +FAIL +pass$", text, re.M)
    assert "  first failure: kernellab rows=17 cols=1000 float32 seed 0:\n    3 of 17000 elements differ" in text
    assert text.splitlines()[-1] == f"FAIL {OP}: 2 of 8 cases fail; 1.2 s from save to result"


def test_with_several_candidates_a_cell_names_the_failing_ones() -> None:
    text = screen.render(_result("fail", failing={(0, "float64")}, labels=("tiled", "tensorcore")))
    assert re.search(r"^  rows=1 cols=1 +pass +FAIL tensorcore$", text, re.M)


def test_failed_argument_checks_are_listed() -> None:
    r = _result("fail")
    r.args[1] = screen.ArgResult("kernellab", "device", "a first input with the wrong device was accepted")
    text = screen.render(r)
    assert "argument checks: FAIL 1 of 4" in text
    assert "    kernellab device: a first input with the wrong device was accepted" in text
    assert text.splitlines()[-1] == f"FAIL {OP}: 1 of 4 argument checks fail; 1.2 s from save to result"


def test_a_compile_error_shows_the_compilers_lines_and_waits() -> None:
    error = ("kernellab_rmsnorm_cpu does not compile:\nrmsnorm.cpp:30:1: error: 'syntax' does not name a type\n"
             "   30 | syntax error here\n(full log: /cache/build.log)")
    r = _result("error", summary="does not compile", error=error, cases=[], args=[], build="")
    text = screen.render(r)
    assert "  rmsnorm.cpp:30:1: error: 'syntax' does not name a type" in text and "shape" not in text
    assert text.splitlines()[-1] == (f"ERROR {OP}: does not compile; 1.2 s from save to result; "
                                     "waiting for the next save")


def test_long_errors_are_cut_to_one_screen_on_a_terminal() -> None:
    error = "\n".join(f"line {i}" for i in range(200))
    text = screen.render(_result("error", summary="does not compile", error=error, cases=[], args=[]), tty=True, height=30)
    assert len(text.splitlines()) <= 30 and "more lines)" in text


def test_on_a_terminal_the_status_is_coloured() -> None:
    assert "\033[1;32mPASS" in screen.render(_result(), tty=True)
    assert "\033[1;31mFAIL" in screen.render(_result("fail", failing={(0, "float32")}), tty=True)


def test_the_first_round_counts_from_the_start() -> None:
    r = _result(trigger=screen.Trigger(changed=[], saved=0.0, first=True))
    assert screen.status_line(r).endswith("1.2 s from start to result")


def test_bench_lines_follow_the_checks() -> None:
    text = screen.render(_result(bench=["bench (quick) rows=4096 cols=4096 float32:", "  kernellab  12.000 ms"]))
    assert "  bench (quick) rows=4096 cols=4096 float32:\n    kernellab  12.000 ms\nPASS" in text


# --------------------------------------------------------------------------- names, files, exit codes


def test_an_unknown_op_gets_the_closest_name(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"no op named `rmsnrm_cpu` in .* \(did you mean rmsnorm_cpu\?\); "
                                          r"the ops are: .*rmsnorm_cpu"):
        spec.find_op(ROOT / "kernels", "rmsnrm_cpu")
    with pytest.raises(ConfigError) as e:
        spec.find_op(ROOT / "kernels", "zzzz")
    assert "did you mean" not in str(e.value)
    assert spec.find_op(ROOT / "kernels", OP) == ROOT / "kernels" / OP
    with pytest.raises(ConfigError, match="no kernels folder"):
        spec.find_op(tmp_path / "nowhere", OP)


def test_k_is_an_expression_for_single_op_tasks_too_and_several_matches_are_named(tmp_path: Path) -> None:
    for name in ("relu", "relu_oob", "softmax"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "op.toml").write_text("")
    assert spec.find_op(tmp_path, "relu") == tmp_path / "relu"  # an exact name wins over its substrings
    assert spec.find_op(tmp_path, "relu and not relu_oob") == tmp_path / "relu"
    assert spec.find_op(tmp_path, "oob") == tmp_path / "relu_oob"
    with pytest.raises(ConfigError, match=r"-k 'relu or soft' matches 3 ops \(relu, relu_oob, softmax\); this task "
                                          r"works on one: name it, or narrow the expression"):
        spec.find_op(tmp_path, "relu or soft")


def test_an_op_whose_op_toml_is_broken_can_still_be_watched(tmp_path: Path) -> None:
    (tmp_path / "toy").mkdir()
    (tmp_path / "toy" / "op.toml").write_text("kind = \n")
    (tmp_path / "_common").mkdir()
    assert spec.op_names(tmp_path) == ["toy"]
    assert spec.find_op(tmp_path, "toy") == tmp_path / "toy"


def test_the_module_answers_a_typo_before_loading_anything(capsys: pytest.CaptureFixture[str]) -> None:
    assert serve.main(["-k", "softmx"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("kernellab: no op named `softmx`") and "(did you mean softmax?)" in err


@pytest.mark.parametrize("path, wanted", [
    ("kernels/op/op.cu", True), ("kernels/op/op.cuh", True), ("kernels/op/binding.cpp", True),
    ("kernels/op/op.h", True), ("kernels/op/reference.py", True), ("kernels/op/op.toml", True),
    ("kernels/op/.op.cu.swp", False), ("kernels/op/4913", False), ("kernels/op/notes.md", False),
    ("kernels/op/.#op.cu", False), ("kernels/op/build.log", False),
])
def test_only_sources_headers_reference_and_spec_start_a_round(path: str, wanted: bool) -> None:
    assert serve.relevant(path) is wanted


def test_the_save_time_is_the_newest_changed_file(tmp_path: Path) -> None:
    a, b = tmp_path / "a.cu", tmp_path / "b.h"
    a.write_text("a")
    b.write_text("b")
    now = time.time()
    os.utime(a, (now - 5, now - 5))
    os.utime(b, (now - 2, now - 2))
    assert serve.save_time([a, b, tmp_path / "gone.cu"], now=now) == pytest.approx(now - 2)
    assert serve.save_time([tmp_path / "gone.cu"], now=now) == now
    os.utime(b, (now - 7200, now - 7200))
    os.utime(a, (now - 7200, now - 7200))
    assert serve.save_time([a, b], now=now) == now, "a copy that kept an old time counts from now"


@pytest.mark.parametrize("code, expected", [
    (0, None), (1, None), (2, None), (130, None),
    (125, "could not start the container"), (127, "could not run `python -m kernellab.watch`"),
    (137, "was killed (SIGKILL"), (139, "stopped on signal SIGSEGV"), (-11, "stopped on signal SIGSEGV"),
    (5, "exited with code 5"),
])
def test_exit_codes_are_explained(code: int, expected: str | None) -> None:
    reason = serve.explain_exit(code)
    assert reason is None if expected is None else expected in (reason or "")


# --------------------------------------------------------------------------- the task


def test_the_task_runs_the_module_where_the_flags_say(monkeypatch: pytest.MonkeyPatch) -> None:
    place = RecordingPlace(code=130)
    with pytest.raises(Exit) as e:
        task_module.watch.body(context(place), k=OP, bench=True)
    assert e.value.code == 130 and not e.value.message, "Ctrl-C: the watcher said goodbye; nothing more"
    assert place.job.argv == ("python", "-m", "kernellab.watch", "-k", OP, "--bench") and place.job.gpu


def test_the_task_answers_a_typo_before_starting_anything() -> None:
    place = RecordingPlace()
    with pytest.raises(Exit, match=r"no op named `rmsnrm_cpu` .*did you mean rmsnorm_cpu\?") as e:
        task_module.watch.body(context(place), k="rmsnrm_cpu")
    assert e.value.code == 2 and not place.jobs  # bad input: 2 in every task


def test_an_expression_selects_the_one_op_it_matches() -> None:
    place = RecordingPlace()
    task_module.watch.body(context(place), k="rmsnorm and cpu")
    assert place.job.argv[-2:] == ("-k", "rmsnorm_cpu")


def test_a_dying_container_is_explained_and_the_exit_is_not_zero() -> None:
    with pytest.raises(Exit, match=r"^kernellab: watch: the container was killed \(SIGKILL") as e:
        task_module.watch.body(context(RecordingPlace(code=137)), k=OP)
    assert e.value.code == 137


def test_a_kernels_folder_for_the_container_must_be_in_the_repository(tmp_path: Path) -> None:
    shutil.copytree(ROOT / "kernels" / OP, tmp_path / OP)
    place = RecordingPlace()
    task_module.watch.body(context(place), k=OP, kernels=str(tmp_path))
    with pytest.raises(UsageError, match="outside the repository"):
        place.job.with_paths(in_workspace)
    task_module.watch.body(context(place), k=OP, kernels=str(ROOT / "kernels"))
    assert place.jobs[1].with_paths(in_workspace)[-2:] == ("--kernels", "/workspace/kernels")


# --------------------------------------------------------------------------- the checks' messages


def test_first_mismatch_names_the_first_element_and_the_worst() -> None:
    torch = pytest.importorskip("torch")
    from kernellab.ops import checks

    expected = torch.zeros(3, 4)
    got = expected.clone()
    got[1, 2] = 0.5
    got[2, 0] = float("nan")
    text = checks.first_mismatch(got, expected, atol=1e-3, rtol=0)
    assert text is not None and text.startswith("2 of 12 elements differ (atol 0.001, rtol 0); first at [1, 2]: got 0.5, expected 0")
    assert "greatest |difference| inf at [2, 0]" in text
    got[1, 2] = 0
    assert "still NaN: never written?" in (checks.first_mismatch(got, expected, atol=1e-3, rtol=0) or "")
    assert checks.first_mismatch(expected, expected, atol=0, rtol=0) is None


# --------------------------------------------------------------------------- a real watcher (slow)


class Watcher:
    """`python -m kernellab.watch` as a subprocess, its output read line by line on a thread."""

    def __init__(self, argv: list[str], env: dict[str, str], cwd: Path = ROOT):
        self.proc = subprocess.Popen(argv, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, text=True, start_new_session=True)
        self.lines: queue.Queue[str] = queue.Queue()
        self.seen: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line.rstrip("\n"))

    def result(self, timeout: float) -> tuple[str, str]:
        """The next round's status line and everything printed before it."""
        block: list[str] = []
        deadline = time.monotonic() + timeout
        while True:
            try:
                line = self.lines.get(timeout=max(0.1, deadline - time.monotonic()))
            except queue.Empty:
                raise AssertionError(f"no result within {timeout:.0f} s; output so far:\n"
                                     + "\n".join(self.seen + block)) from None
            block.append(line)
            if re.match(r"^(PASS|FAIL|ERROR|CRASH) ", line):
                self.seen += block
                return line, "\n".join(block)
            if time.monotonic() > deadline:
                raise AssertionError("no result in time; output so far:\n" + "\n".join(self.seen + block))

    def rest(self, timeout: float) -> str:
        """Everything until the process ends."""
        self.proc.wait(timeout=timeout)
        time.sleep(0.2)
        lines = []
        while not self.lines.empty():
            lines.append(self.lines.get())
        return "\n".join(lines)

    def kill(self) -> None:
        if self.proc.poll() is None:
            with _suppress():
                os.killpg(self.proc.pid, signal.SIGINT)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                with _suppress():
                    os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=15)


def _suppress() -> Any:
    import contextlib

    return contextlib.suppress(ProcessLookupError, PermissionError)


def copy_op(kernels: Path) -> Path:
    """rmsnorm_cpu and the shared headers, copied into a kernels folder of the test's own."""
    shutil.copytree(ROOT / "kernels" / OP, kernels / OP)
    shutil.copytree(ROOT / "kernels" / "_common", kernels / "_common")
    return kernels / OP


#: One edit of the kernel that breaks it (a 1% error), one that does not compile.
BREAK = ("yr[c] = xr[c] * scale * w[c];", "yr[c] = xr[c] * scale * w[c] * static_cast<T>(1.01);")
SYNTAX = "this is not C++\n"
FIRST_BUILD_S = 600   # a cold build with torch headers: ~35 s on 2 cores, more on a busy CI machine
EDIT_S = 180          # one kernel file recompiled and relinked: seconds


@pytest.mark.slow
def test_the_watcher_rebuilds_and_rechecks_on_every_save(tmp_path: Path) -> None:
    pytest.importorskip("torch", reason="the watcher builds and checks with torch")
    pytest.importorskip("watchfiles")
    folder = copy_op(tmp_path / "kernels")
    kernel = folder / "rmsnorm.cpp"
    good = kernel.read_text()
    assert BREAK[0] in good
    env = {**os.environ, "KERNELLAB_CACHE": str(tmp_path / "cache"), "PYTHONPATH": str(ROOT / "src"),
           "TERM": "dumb"}
    w = Watcher([sys.executable, "-m", "kernellab.watch", "-k", OP, "--kernels", str(tmp_path / "kernels")], env)
    try:
        status, block = w.result(FIRST_BUILD_S)
        # 30 forward cases and 30 of the backward's gradients (op.toml's [backward]).
        assert status.startswith(f"PASS {OP}: 60 cases and 4 argument checks pass"), block
        assert "\033" not in block, "plain lines when stdout is not a terminal"

        kernel.write_text(good.replace(*BREAK))  # wrong by 1%
        status, block = w.result(EDIT_S)
        assert status.startswith(f"FAIL {OP}: 30 of 60 cases fail;") and "s from save to result" in status, block
        # The forward fails, its backward (which does not call it) passes: the grid names the failing one.
        assert re.search(r"^  rows=17 cols=1000 +FAIL kernellab +FAIL kernellab *$", block, re.M), block
        assert re.search(r"first failure: kernellab rows=1 cols=1 float32 seed 0:\n    1 of 1 elements differ", block)

        kernel.write_text(good.replace(*BREAK) + SYNTAX)  # does not compile: the compiler's lines
        status, block = w.result(EDIT_S)
        assert status.startswith(f"ERROR {OP}: does not compile;") and status.endswith("waiting for the next save")
        assert re.search(r"rmsnorm\.cpp:\d+:\d+: error:", block), block

        kernel.write_text(good)  # fixed: the next good edit recovers
        status, block = w.result(EDIT_S)
        assert status.startswith(f"PASS {OP}:") and "rebuilt in" in block, block

        reference = folder / "reference.py"  # reference.py is imported again
        ref_good = reference.read_text()
        reference.write_text(ref_good.replace("EPS = 1e-6", "EPS = 1e-1"))
        status, block = w.result(EDIT_S)
        assert status.startswith(f"FAIL {OP}:"), block
        reference.write_text(ref_good)
        assert w.result(EDIT_S)[0].startswith(f"PASS {OP}:")

        spec = folder / "op.toml"  # op.toml is read again
        spec.write_text(spec.read_text().replace("  { rows = 1, cols = 1 },", "  { rows = 1, cols = 1 },\n  { rows = 5, cols = 3 },"))
        status, block = w.result(EDIT_S)
        assert status.startswith(f"PASS {OP}: 72 cases"), block  # 36 forward, 36 backward
        assert re.search(r"^  rows=5 cols=3 +pass +pass$", block, re.M), block

        os.killpg(w.proc.pid, signal.SIGINT)  # Ctrl-C
        rest = w.rest(30)
        assert w.proc.returncode == 130
        assert rest.strip().splitlines() == [f"watch: stopped watching {OP}."], rest
    finally:
        w.kill()
