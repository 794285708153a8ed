"""`invoke watch`: one round (build, load, check, optionally bench) in a child forked from the watcher."""
from __future__ import annotations

import contextlib
import dataclasses
import importlib
import io
import json
import os
import shutil
import signal
import sys
import time
import traceback
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from .. import ROOT
from ..errors import ConfigError, ExtensionError
from ..ops.spec import OpSpec, parse_spec
from .screen import ArgResult, CaseResult, RoundResult, Trigger, render, shape_label

if TYPE_CHECKING:
    from ..ops.library import OpModule


#: A round's exit codes: checks pass, something fails, the op cannot run here, the round itself broke.
PASSED, FAILED, UNAVAILABLE, BROKEN = 0, 1, 3, 70
#: Seconds a stopped round gets to end (a build stops at once; a kernel stuck in a loop never does)
#: before it is killed.
STOP_GRACE_S = 2.0


# --------------------------------------------------------------------------- one round (in a child)


def run_round(root: Path, name: str, trigger: Trigger, *, bench: bool = False) -> tuple[RoundResult, str | None]:
    """Re-read the op (op.toml, reference.py), rebuild what changed, run its checks (and with `bench`
    one quick benchmark shape). Returns the result, and why the op cannot run here (or None).
    Meant for a fresh process: kernellab.ops keeps a loaded op for the life of its process."""
    from ..ops import checks, library

    result = RoundResult(op=name, trigger=trigger)
    clock = [time.time()]
    if not trigger.first:
        result.phases["start"] = clock[0] - trigger.saved  # the save seen, the round told, its child awake

    def phase(name: str) -> None:
        now = time.time()
        result.phases[name] = now - clock[0]
        clock[0] = now

    def finish(status: str, summary: str = "", error: str = "") -> tuple[RoundResult, str | None]:
        result.status, result.summary, result.error = status, summary, error
        result.seconds = time.time() - trigger.saved
        return result, None

    try:
        spec = parse_spec(root / name / "op.toml")
    except ConfigError as e:
        return finish("error", "op.toml is not valid", str(e))
    reason = library.unavailable(spec)
    if reason:
        return result, reason
    backwards = [f"{label} backward" for label in (spec.backward.candidates if spec.backward else {})]
    result.candidates, result.shapes, result.dtypes = [*spec.candidates, *backwards], spec.test_shapes, spec.dtypes
    t0 = time.perf_counter()
    try:
        # The .cu files in a library of their own: a .cu edit relinks only that (this round is a fresh fork).
        module = library.load(spec, kernel_library=True)
    except ExtensionError as e:
        text = str(e)
        return finish("error", "does not compile" if " does not compile:" in text else "does not load", text)
    except Exception as e:  # reference.py or kernel.py raises on import; op.toml and reference.py disagree
        return finish("error", "does not load", _explain_import(e, spec.path))
    result.build = _build_note(module, time.perf_counter() - t0)
    phase("build")

    for reason in module.unavailable.values():
        result.build += f"; {reason}"
    for label, shape, dtype, seed in checks.cases(spec):
        if label in module.unavailable:
            continue
        try:
            failure = checks.match_reference(spec, module, label, shape, dtype, seed)
        except Exception as e:  # make_inputs or the reference itself fails
            failure = f"the check raised {type(e).__name__}: {_first_line(e)}"
        result.cases.append(CaseResult(label, shape, dtype, seed, failure))
    for label, shape, dtype, seed in (c for c in checks.gradient_cases(spec) if c[0] in module.backwards):  # [backward]
        failure = _guarded(checks.match_gradients, spec, module, label, shape, dtype, seed)
        result.cases.append(CaseResult(f"{label} backward", shape, dtype, seed, failure))
    for label in (c for c in spec.candidates if c not in module.unavailable):
        for mistake in checks.BAD_INPUTS:
            result.args.append(ArgResult(label, mistake, _guarded(checks.rejects_bad_input, spec, module, label, mistake)))
        result.args.append(ArgResult(label, "shapes", _guarded(checks.rejects_bad_shapes, spec, module, label)))
    ok = all(c.failure is None for c in result.cases) and all(a.failure is None for a in result.args)
    phase("checks")
    if bench:
        result.bench = quick_bench(spec, module) if ok else ["bench: skipped until the checks pass"]
        phase("bench")
    return finish("pass" if ok else "fail")


def quick_bench(spec: OpSpec, module: OpModule) -> list[str]:
    """Lines for one quick benchmark (kernellab.bench's quick settings): the first bench shape and dtype,
    the candidates and the baselines except `compile` (torch.compile would compile again every round)."""
    import torch

    from ..bench import clocks, runner, timing
    from ..bench.results import impl_label

    shape, dtype = spec.bench_shapes[0], spec.bench_dtypes[0]
    baselines = {k: v for k, v in module.baselines.items() if k != "compile"}
    view = _BenchView(module, baselines)
    ctx = runner.Context("cuda" if torch.cuda.is_available() else "cpu", timing.QUICK, True, None,
                         clocks.ClockMonitor(None), runner.Progress(1, io.StringIO()), None)
    try:
        rows = runner.bench_case(spec, view, shape, dtype, ctx)
    except Exception as e:  # a bench that cannot run is a line, not a broken round
        return [f"bench: failed: {type(e).__name__}: {_first_line(e)}"]
    left_out = " (compile baseline left out)" if "compile" in module.baselines else ""
    lines = [f"bench (quick) {shape_label(shape)} {dtype}{left_out}:"]
    width = max(len(impl_label(r)) for r in rows)
    for row in rows:  # an op with a backward: forward, then backward and full rows (`kernellab backward`)
        if row["status"] != "ok":
            lines.append(f"  {impl_label(row).ljust(width)}  {row['status']}: {row['reason']}")
            continue
        text = f"  {impl_label(row).ljust(width)}  {_ms(row['stats']['median'])}"
        if row.get("gbps"):
            text += f"  {row['gbps']:8.1f} GB/s"
        speedups = row.get("speedups") or {}
        text += "".join(f"  {s['value']:.2f}x {b}" for b, s in speedups.items())
        lines.append(text)
    return lines


class _BenchView:
    """An OpModule as kernellab.bench sees it, with a chosen set of baselines."""

    def __init__(self, module: OpModule, baselines: dict[str, Any]):
        self._module = module
        self.candidates = module.candidates
        self.baselines = baselines

    def __getattr__(self, name: str) -> Any:  # the rest (make_inputs, reference, backwards, ...) as the op's
        return getattr(self._module, name)


def _ms(ms: float) -> str:
    return f"{ms * 1e3:9.2f} us" if ms < 1 else f"{ms:9.3f} ms"


def _guarded(check: Any, *args: Any) -> str | None:
    try:
        return check(*args)
    except Exception as e:
        return f"the check raised {type(e).__name__}: {_first_line(e)}"


def _build_note(module: OpModule, seconds: float) -> str:
    build = module.build
    if build is None:
        return "Triton: compiles at the first call"
    if build.compiled:
        return f"rebuilt in {build.seconds:.1f} s"
    return f"build up to date (loaded in {seconds:.1f} s)"


def _explain_import(e: BaseException, folder: Path) -> str:
    """The exception, and where in the op's own files it was raised (a SyntaxError carries its line)."""
    frames = [f for f in traceback.extract_tb(e.__traceback__) if Path(f.filename).resolve().is_relative_to(folder.resolve())]
    where = traceback.format_list(frames[-1:]) if frames else []
    return "".join([*where, *traceback.format_exception_only(type(e), e)]).replace(f"{ROOT}/", "")


def _first_line(e: BaseException) -> str:
    return next((line.strip() for line in str(e).splitlines() if line.strip()), "")


# --------------------------------------------------------------------------- rounds as child processes


class Round:
    """A child process forked ahead of a save (standby), which runs one round once `start`ed."""

    def __init__(self, root: Path, name: str, bench: bool, tty: bool):
        sys.stdout.flush()
        sys.stderr.flush()
        read, write = os.pipe()
        # Stops stay blocked across the fork: the child takes them only once its own handlers are set.
        blocked = signal.pthread_sigmask(signal.SIG_BLOCK, _STOPS)
        try:
            with warnings.catch_warnings():  # Python >= 3.12 warns about forking with threads (watchfiles')
                warnings.simplefilter("ignore", DeprecationWarning)
                pid = os.fork()
            if pid == 0:
                os.close(write)
                _child_process(read, root, name, bench, tty)  # never returns
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
        os.close(read)
        with contextlib.suppress(OSError):
            os.setpgid(pid, pid)  # also here, so that the group exists before the parent may signal it
        self.pid, self.name = pid, name
        self.code: int | None = None
        self._fd: int | None = write
        self.trigger: Trigger | None = None
        self.started_at = 0.0

    @property
    def started(self) -> bool:
        return self.trigger is not None

    def start(self, trigger: Trigger) -> None:
        self.trigger, self.started_at = trigger, time.time()
        fd, self._fd = self._fd, None
        if fd is None:
            return
        try:
            os.write(fd, json.dumps(dataclasses.asdict(trigger)).encode())
        except OSError:
            pass  # the child is gone; poll() reports how it ended
        finally:
            os.close(fd)

    def poll(self) -> int | None:
        """The exit code once the child has ended (negative: killed by that signal), else None."""
        if self.code is None:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self.code = os.waitstatus_to_exitcode(status)
        return self.code

    def stop(self) -> None:
        """End the child and everything it started: a standby leaves when its pipe closes; a round gets
        SIGINT (to its group: its ninja and compilers too), then SIGKILL after STOP_GRACE_S."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
            if self._wait(2.0):
                return
        for sig, wait in ((signal.SIGINT, STOP_GRACE_S), (signal.SIGKILL, 10.0)):
            if self.poll() is not None:
                break
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.pid, sig)
            if self._wait(wait):
                break
        if self.code == -signal.SIGKILL and self.started:
            _remove_build_locks(self.name, self.started_at)

    def _wait(self, seconds: float) -> bool:
        deadline = time.monotonic() + seconds
        while self.poll() is None and time.monotonic() < deadline:
            time.sleep(0.02)
        return self.code is not None


_STOPS = {signal.SIGINT, signal.SIGTERM}


def _remove_build_locks(name: str, since: float) -> None:
    """Remove the build lock a killed round may have held (torch's build lock has no owner to check, and
    the next build would wait for it forever): the op's lock files made since that round started."""
    from .. import cache_root

    for lock in (cache_root() / "torch_extensions").glob(f"kernellab_{name}-*/lock"):
        with contextlib.suppress(OSError):
            if lock.stat().st_mtime >= since - 1:
                lock.unlink()


def _child_process(fd: int, root: Path, name: str, bench: bool, tty: bool) -> NoReturn:
    """The forked child: wait for the trigger, run the round, exit with its code (never returns)."""
    code = BROKEN
    try:
        os.setpgid(0, 0)
        for sig in _STOPS:
            signal.signal(sig, _interrupt_once)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, _STOPS)
        code = _child(fd, root, name, bench, tty)
    except KeyboardInterrupt:
        code = 130
    except BaseException:
        traceback.print_exc()
    finally:
        for _ in range(3):  # a stop that lands here must not take this process back into the watcher's code
            try:
                signal.pthread_sigmask(signal.SIG_BLOCK, _STOPS)
                sys.stdout.flush()
                sys.stderr.flush()
                break
            except BaseException:
                continue
        os._exit(code)


def _child(fd: int, root: Path, name: str, bench: bool, tty: bool) -> int:
    _prepare(root, name)
    data = b""
    while chunk := os.read(fd, 65536):
        data += chunk
    os.close(fd)
    if not data:
        return 0  # stopped before a save came
    trigger = Trigger(**json.loads(data))
    result, reason = run_round(root, name, trigger, bench=bench)
    if reason:
        print(f"kernellab: {reason}", file=sys.stderr, flush=True)
        return UNAVAILABLE
    height = shutil.get_terminal_size().lines if tty else None
    print(render(result, tty=tty, height=height), flush=True)
    return PASSED if result.status == "pass" else FAILED


def _interrupt_once(signum: int, frame: Any) -> None:
    for sig in _STOPS:  # one stop is enough: a second must not cut the cleanup short
        signal.signal(sig, signal.SIG_IGN)
    raise KeyboardInterrupt


def _prepare(root: Path, name: str) -> None:
    """What a round needs before its build, done while waiting for the save: the GPU's context, and one
    pass of the checks' reference side (inputs, reference, comparison), so that the GPU code those use is
    loaded (CUDA loads a kernel at its first launch in a process) and the allocator holds the memory.
    Nothing computed here is kept: the round makes its inputs and references again, from the files as
    they are then."""
    try:
        spec = parse_spec(root / name / "op.toml")
        import torch

        from ..ops import checks, library

        torch.testing.assert_close(torch.zeros(2), torch.zeros(2))
        if spec.needs_gpu and torch.cuda.is_available():
            torch.zeros(1, device="cuda")
        if spec.kind == "triton":
            importlib.import_module("triton")
        if spec.needs_gpu and not torch.cuda.is_available():
            return
        reference = library.OpModule(spec, library.import_file(spec, "reference.py"), {}, None)
        for _, shape, dtype, seed in checks.cases(spec):
            checks.warm_up(spec, reference, shape, dtype, seed)
        if spec.needs_gpu:
            torch.cuda.synchronize()
    except Exception:
        pass  # the round itself meets and reports whatever went wrong here


