"""`invoke watch`: rebuild and recheck one op on every save, in one long-lived process.

    python -m kernellab.watch -k OP [--bench] [--kernels DIR]

What the task runs, in the target's container or natively. It watches `kernels/<op>/` and
`kernels/_common/` (watchfiles: inotify, also on bind mounts) and, after every save, rebuilds what
changed (kernellab.ops / kernellab.ops.extensions: a keyed ninja build in the persistent cache, failed
builds remembered), reruns the op's checks (kernellab.ops.checks, the ones tests/test_kernels.py runs),
with `--bench` times one quick benchmark shape, and prints a one-screen result: pass/fail per shape
and dtype, the first failure, the time from the save to the result. A compile error shows the
compiler's lines and waits for the next save.

How: this process imports torch once and never runs anything on it; each round runs in a child forked
from it (torch already loaded, so no start-up cost), which builds, loads and checks in a process of its
own. A library loaded into a process stays there under its name: rebuilding in one process would need a
new name per build, which changes every compile command, so ninja would recompile every source on
every save; a fresh child loads the one incrementally rebuilt library under its usual name. A child
also leaves nothing behind: a kernel that corrupts the CUDA context or crashes ends its round only.
The next child is forked as soon as a round ends and prepares (the GPU's context) while you edit.
A save during a round stops that round and starts a new one. Each child is its own process group:
stopping it stops its ninja and compilers too.

Output: on a terminal, each round clears the screen; otherwise plain lines, one status line per round
starting with PASS, FAIL, ERROR or CRASH. Ctrl-C stops (exit 130, one goodbye line).
"""
from __future__ import annotations

import argparse
import contextlib
import importlib
import os
import signal
import sys
import time
from pathlib import Path
from typing import IO, Any, Iterable

from .. import shown
from ..errors import KernellabError
from ..ops.spec import KERNELS, find_op
from .rounds import _STOPS, FAILED, PASSED, UNAVAILABLE, Round
from .screen import Trigger

#: Files whose save starts a round (anything else in the watched folders is ignored).
SOURCE_SUFFIXES = frozenset({".cu", ".cuh", ".cpp", ".cc", ".cxx", ".c", ".h", ".hh", ".hpp", ".inl", ".py", ".toml"})
#: How often (ms) the watcher looks at a running round between file events.
POLL_MS = 200
#: watchfiles: wait this long (ms) without further changes before starting, at most `DEBOUNCE_MS` in all.
STEP_MS, DEBOUNCE_MS = 50, 1600


# --------------------------------------------------------------------------- which op


def relevant(path: str | Path) -> bool:
    """Whether a change to `path` should start a round: a source, header, reference.py or op.toml."""
    p = Path(path)
    return p.suffix in SOURCE_SUFFIXES and not p.name.startswith((".", "#"))


def save_time(paths: Iterable[str | Path], now: float | None = None) -> float:
    """When the save happened: the newest modification time of the changed files that still exist,
    else `now` (also when that time is in the future, or an hour old: a copy that kept its time)."""
    now = time.time() if now is None else now
    times = []
    for p in paths:
        with contextlib.suppress(OSError):
            times.append(os.stat(p).st_mtime)
    newest = max(times, default=now)
    return newest if now - 3600 < newest <= now else now


# --------------------------------------------------------------------------- the watcher


def serve(root: Path, name: str, *, bench: bool = False, out: IO[str] | None = None,
          started: float | None = None) -> int:
    """Watch op `name` under `root` until Ctrl-C (130), or until it turns out not to run here (1).
    `started`: when the watcher started (time.time()), for the first round's time to result."""
    started = time.time() if started is None else started
    out = out or sys.stdout
    folder = find_op(root, name)
    watchfiles = _preload(bench)
    common = root / "_common"
    paths = [folder, *([common] if common.is_dir() else [])]
    tty = out.isatty() and os.environ.get("TERM") != "dumb"
    say = _Say(out, tty)
    say.line(f"watch: {name}: {', '.join(shown(p) + '/' for p in paths)}; Ctrl-C stops")
    running: Round | None = None
    standby: Round | None = None
    previous = {sig: signal.getsignal(sig) for sig in _STOPS}
    signal.signal(signal.SIGTERM, _terminate)  # `kill`, `docker stop`: stop as on Ctrl-C
    try:
        events = watchfiles.watch(*paths, watch_filter=_filter(watchfiles), step=STEP_MS, debounce=DEBOUNCE_MS,
                                  rust_timeout=POLL_MS, yield_on_timeout=True, raise_interrupt=True)
        next(events)  # watching from here on: no save is missed between the first round and the loop
        running = Round(root, name, bench, tty)
        say.header(None)
        running.start(Trigger(changed=[], saved=started, first=True))
        for raw in events:
            if running is not None and running.poll() is not None:
                if running.code == UNAVAILABLE and running.trigger is not None and running.trigger.first:
                    return 1  # the reason is printed, once
                say.ended(running, name)
                running, standby = None, Round(root, name, bench, tty)
            if standby is not None and standby.poll() is not None:
                standby = Round(root, name, bench, tty)  # it died waiting (killed from outside): a fresh one
            changed = sorted({p for _, p in raw if relevant(p)})
            if not changed:
                continue
            if running is not None:
                running.stop()
                say.line("(stopped: a newer save came)")
            trigger = Trigger(changed=[_relative(p, root) for p in changed], saved=save_time(changed))
            running, standby = standby or Round(root, name, bench, tty), None
            say.header(trigger)
            running.start(trigger)
        return 0  # the watcher ended on its own (the folders are gone)
    except KeyboardInterrupt:
        for sig in _STOPS:  # a second Ctrl-C must not cut the cleanup short
            signal.signal(sig, signal.SIG_IGN)
        for child in (running, standby):
            if child is not None:
                child.stop()
        say.goodbye(name)
        return 130
    except OSError as e:  # a watched folder removed, no process left to fork
        raise KernellabError(f"watching {name} stopped: {e}") from None
    finally:
        for child in (running, standby):
            if child is not None:
                child.stop()
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _terminate(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


class _Say:
    """The watcher's own lines: a header per round (on a terminal, a cleared screen), crashes, goodbye."""

    def __init__(self, out: IO[str], tty: bool):
        self.out, self.tty = out, tty

    def line(self, text: str) -> None:
        self.out.write(text + "\n")
        self.out.flush()

    def header(self, trigger: Trigger | None) -> None:
        what = "first build and check" if trigger is None else f"{', '.join(trigger.changed)} saved"
        if self.tty:
            self.out.write("\033[H\033[2J")
            self.line(f"{time.strftime('%H:%M:%S')} {what}: building and checking ...")
        else:
            self.line(f"--- {time.strftime('%H:%M:%S')} {what}")

    def ended(self, child: Round, name: str) -> None:
        code = child.code
        if code in (PASSED, FAILED, UNAVAILABLE, 130) or code is None:
            return  # the round printed its result
        since = child.trigger.saved if child.trigger is not None else time.time()
        how = f"died from signal {_signal_name(-code)}" if code < 0 else f"failed (exit code {code}; traceback above)"
        self.line(f"CRASH {name}: the round {how}; {time.time() - since:.1f} s from save; waiting for the next save")

    def goodbye(self, name: str) -> None:
        self.line(f"\nwatch: stopped watching {name}.")


def _filter(watchfiles: Any) -> Any:
    default = watchfiles.DefaultFilter()
    return lambda change, path: default(change, path) and relevant(path)


def _preload(bench: bool) -> Any:
    """Import what every round needs, once, here: the rounds are forked from this process."""
    # Importing torch.utils.cpp_extension asks torch.cuda.is_available(), which initializes CUDA unless the
    # check goes through NVML; CUDA initialized here cannot be used in the forked rounds (seen on the H100).
    os.environ.setdefault("PYTORCH_NVML_BASED_CUDA_CHECK", "1")
    try:
        watchfiles = importlib.import_module("watchfiles")
    except ImportError:
        raise KernellabError("watchfiles is not installed here: `pip install watchfiles` (an image built before "
                             "`invoke watch` existed lacks it: rebuild it with `invoke build-image`).") from None
    try:
        importlib.import_module("torch")
    except ImportError:
        raise KernellabError("torch is not installed in this Python: watch in a target's container "
                             "(`invoke watch -k OP`), or install torch for --native.") from None
    for module in ("torch.testing", "torch.utils.cpp_extension", "kernellab.ops.library", "kernellab.ops.checks",
                   *(("kernellab.bench.runner",) if bench else ())):
        importlib.import_module(module)
    with contextlib.suppress(Exception):  # which options this nvcc has: asked once, here, not in every round
        importlib.import_module("kernellab.ops.extensions").cuda_flags()
    return watchfiles


def _relative(path: str, root: Path) -> str:
    with contextlib.suppress(ValueError):
        return str(Path(path).resolve().relative_to(root.resolve()))
    return path


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return str(number)


# --------------------------------------------------------------------------- exit codes, entry point


def explain_exit(code: int, where: str = "the container") -> str | None:
    """Why the watcher ended with `code` (from runner.run or the native process), or None when
    nothing needs saying: 0, Ctrl-C (130), or the watcher's own errors (1, 2), already printed."""
    if code in (0, 1, 2, 130):
        return None
    if where == "the container":
        if code == 125:
            return "the container engine could not start the container (exit code 125; its message is above)."
        if code in (126, 127):
            return (f"the container could not run `python -m kernellab.watch` (exit code {code}); "
                    "is the image a kernellab image with its venv on PATH?")
    if code == 137 or code == -9:
        return (f"{where} was killed (SIGKILL, exit code {code}): out of memory, or stopped from outside "
                "(`docker kill`, `docker rm -f`).")
    number = -code if code < 0 else code - 128 if code > 128 else None
    if number is not None and number < 65:
        return f"{where} stopped on signal {_signal_name(number)} (exit code {code})."
    return f"{where} exited with code {code}."


def main(argv: list[str] | None = None) -> int:
    """`python -m kernellab.watch -k OP [--bench] [--kernels DIR]`: what `invoke watch` runs."""
    parser = argparse.ArgumentParser(prog="python -m kernellab.watch", description=__doc__.splitlines()[0])
    parser.add_argument("-k", dest="op", required=True, metavar="OP", help="the op to watch (a folder under kernels/)")
    parser.add_argument("--bench", action="store_true", help="also time one quick benchmark shape after the checks")
    parser.add_argument("--kernels", type=Path, metavar="DIR", help="the kernels folder (default: kernels/)")
    started = time.time()
    args = parser.parse_args(argv)
    root = args.kernels.resolve() if args.kernels else KERNELS
    try:
        find_op(root, args.op)
        return serve(root, args.op, bench=args.bench, started=started)
    except KernellabError as e:
        print(f"kernellab: {e}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:  # before the watcher runs (importing torch)
        print(f"\nwatch: stopped watching {args.op}.", flush=True)
        return 130


if __name__ == "__main__":
    sys.exit(main())
