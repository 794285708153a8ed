"""The one way kernellab runs external commands: argv lists, never shell strings.

A failure raises CommandError naming the command, its exit code and the last lines of its output.
"""
from __future__ import annotations

import collections
import contextlib
import os
import shutil
import signal
import subprocess
import sys
import threading
from dataclasses import dataclass
from typing import IO, Iterator, Mapping, Protocol, Sequence

from .errors import CommandError, KernellabError

TAIL_LINES = 25


class Writer(Protocol):
    """Where streamed output goes: a text file, or anything with write and flush."""

    def write(self, text: str, /) -> int: ...

    def flush(self) -> None: ...


@dataclass
class Result:
    argv: list[str]
    returncode: int
    stdout: str
    stderr: str

    @property
    def ok(self) -> bool:
        return self.returncode == 0


def which(name: str) -> str | None:
    return shutil.which(name)


def _env(env: Mapping[str, str] | None) -> dict[str, str] | None:
    if env is None:
        return None
    merged = dict(os.environ)
    merged.update(env)
    return merged


def run(
    argv: Sequence[str],
    *,
    check: bool = True,
    stream: bool = False,
    cwd: str | os.PathLike | None = None,
    env: Mapping[str, str] | None = None,
    input: str | bytes | None = None,
    timeout: float | None = None,
    hint: str = "",
    out: Writer | None = None,
) -> Result:
    """Run argv; capture its output, or with stream=True also echo it line by line to `out`.

    check=True raises CommandError on a non-zero exit; a missing program raises KernellabError.
    """
    argv = [str(a) for a in argv]
    if shutil.which(argv[0]) is None and not os.path.exists(argv[0]):
        raise KernellabError(f"`{argv[0]}` is not installed or not on PATH; install it and try again.")
    if not stream:
        try:
            p = subprocess.run(
                argv, cwd=cwd, env=_env(env), input=input, capture_output=True,
                text=not isinstance(input, bytes), timeout=timeout,
            )
        except subprocess.TimeoutExpired as e:
            raise CommandError(argv, -1, _text(e.stdout) + _text(e.stderr), hint=f"timed out after {timeout:.0f} s") from None
        stdout, stderr = _text(p.stdout), _text(p.stderr)
        result = Result(argv, p.returncode, stdout, stderr)
        if check and p.returncode != 0:
            raise CommandError(argv, p.returncode, _tail(stderr or stdout), hint=hint)
        return result
    return _run_streaming(argv, check=check, cwd=cwd, env=env, input=input, timeout=timeout, hint=hint, out=out)


#: After Ctrl-C, how long call() lets its child finish on its own (a container client forwards the
#: signal, waits for the container and removes it) before killing it.
INTERRUPT_GRACE_S = 10.0
#: How long call() waits before passing a SIGINT on, in case it reached this process alone (`kill -INT`).
INTERRUPT_FORWARD_S = 1.0


def call(argv: Sequence[str], *, cwd: str | os.PathLike | None = None, env: Mapping[str, str] | None = None) -> int:
    """Run argv attached to this terminal (stdin, stdout, stderr); return its exit code.

    For interactive shells and for commands whose exit code is the answer (pytest in a container).
    Ctrl-C reaches the child through the terminal; here it returns 130 once the child has stopped:
    the child gets INTERRUPT_GRACE_S to stop cleanly (a SIGINT sent to this process alone is passed
    on after INTERRUPT_FORWARD_S), then, or at a second Ctrl-C, it is killed.
    """
    argv = [str(a) for a in argv]
    if shutil.which(argv[0]) is None and not os.path.exists(argv[0]):
        raise KernellabError(f"`{argv[0]}` is not installed or not on PATH; install it and try again.")
    p = subprocess.Popen(argv, cwd=cwd, env=_env(env))
    try:
        return p.wait()
    except KeyboardInterrupt:
        try:
            if not _exits_within(p, INTERRUPT_FORWARD_S):
                p.send_signal(signal.SIGINT)
                _exits_within(p, INTERRUPT_GRACE_S - INTERRUPT_FORWARD_S)
        except KeyboardInterrupt:
            pass
        if p.poll() is None:
            p.kill()
            p.wait()
        return 130


#: The exit code of a command stopped at its timeout (as coreutils' `timeout` gives).
TIMED_OUT = 124


def to_file(argv: Sequence[str], file: IO[str], *, cwd: str | os.PathLike | None = None,
            env: Mapping[str, str] | None = None, timeout: float | None = None) -> int:
    """Run argv with its output (stdout and stderr together) written to file; return its exit code, TIMED_OUT
    when it ran past timeout (it is killed). Ctrl-C stops it, then is raised."""
    argv = [str(a) for a in argv]
    if shutil.which(argv[0]) is None and not os.path.exists(argv[0]):
        raise KernellabError(f"`{argv[0]}` is not installed or not on PATH; install it and try again.")
    file.flush()
    # A session of its own: at the timeout (or Ctrl-C) everything it started goes too, not only argv[0] (a shell).
    p = subprocess.Popen(argv, cwd=cwd, env=_env(env), stdout=file, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                         start_new_session=True)

    def signal_all(sig: int) -> None:
        try:
            os.killpg(p.pid, sig)
        except ProcessLookupError:
            pass

    try:
        return p.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        signal_all(signal.SIGKILL)
        p.wait()
        return TIMED_OUT
    except BaseException:
        signal_all(signal.SIGTERM)
        try:
            p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            signal_all(signal.SIGKILL)
            p.wait()
        raise


def _exits_within(p: subprocess.Popen, seconds: float) -> bool:
    try:
        p.wait(timeout=seconds)
        return True
    except subprocess.TimeoutExpired:
        return False


def _run_streaming(argv, *, check, cwd, env, input, timeout, hint, out) -> Result:
    out = out or sys.stdout
    last: collections.deque[str] = collections.deque(maxlen=TAIL_LINES)
    lines: list[str] = []
    p = subprocess.Popen(
        argv, cwd=cwd, env=_env(env), stdin=subprocess.PIPE if input is not None else None,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1, errors="replace",
    )
    if input is not None:
        def feed() -> None:
            assert p.stdin is not None
            p.stdin.write(input if isinstance(input, str) else input.decode())
            p.stdin.close()
        threading.Thread(target=feed, daemon=True).start()
    try:
        assert p.stdout is not None
        for line in p.stdout:
            out.write(line)
            out.flush()
            last.append(line)
            lines.append(line)
        p.wait(timeout=timeout)
    except BaseException:
        # Ctrl-C or a timeout: stop the child so nothing half-done goes on in the background.
        p.terminate()
        try:
            p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            p.kill()
        raise
    text = "".join(lines)
    if check and p.returncode != 0:
        raise CommandError(argv, p.returncode, "".join(last), hint=hint)
    return Result(argv, p.returncode, text, "")


@contextlib.contextmanager
def pipe_from(argv: Sequence[str], *, env: Mapping[str, str] | None = None, hint: str = "") -> Iterator[IO[bytes]]:
    """Yield the binary stdout of a running command; on leaving, wait and raise CommandError on failure.

    stderr is kept (last lines) for the error message. Leaving through an exception kills the command.
    """
    with _pipe(argv, env, hint, reading=True) as pipe:
        yield pipe.stream


@contextlib.contextmanager
def pipe_to(argv: Sequence[str], *, env: Mapping[str, str] | None = None, hint: str = "") -> Iterator[Pipe]:
    """Yield a Pipe whose .stream is the binary stdin of a running command.

    On leaving: close stdin, wait, and raise CommandError on a non-zero exit. After the block,
    pipe.output holds what the command printed (stdout and stderr together).
    """
    with _pipe(argv, env, hint, reading=False) as pipe:
        yield pipe


class Pipe:
    def __init__(self, stream: IO[bytes]):
        self.stream = stream
        self.output = ""

    def write(self, data: bytes) -> int:
        return self.stream.write(data)


@contextlib.contextmanager
def _pipe(argv: Sequence[str], env: Mapping[str, str] | None, hint: str, reading: bool) -> Iterator[Pipe]:
    argv = [str(a) for a in argv]
    if shutil.which(argv[0]) is None:
        raise KernellabError(f"`{argv[0]}` is not installed or not on PATH; install it and try again.")
    chatter: list[bytes] = []
    if reading:
        p = subprocess.Popen(argv, env=_env(env), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        side, stream = p.stderr, p.stdout
    else:
        p = subprocess.Popen(argv, env=_env(env), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT)
        side, stream = p.stdout, p.stdin
    assert side is not None and stream is not None

    def drain() -> None:
        for line in side:
            chatter.append(line)

    t = threading.Thread(target=drain, daemon=True)
    t.start()
    pipe = Pipe(stream)
    try:
        yield pipe
        stream.close()
    except BaseException:
        p.kill()
        p.wait()
        raise
    p.wait()
    t.join(timeout=10)
    pipe.output = b"".join(chatter).decode(errors="replace")
    if p.returncode != 0:
        raise CommandError(argv, p.returncode, _tail(pipe.output), hint=hint)


def _text(b: str | bytes | None) -> str:
    if b is None:
        return ""
    return b.decode(errors="replace") if isinstance(b, bytes) else b


def _tail(text: str, n: int = TAIL_LINES) -> str:
    return "\n".join(text.rstrip().splitlines()[-n:])
