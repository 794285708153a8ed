"""One benchmark per GPU at a time: a second run waits on a file lock and says who holds it.

The lock lives under $KERNELLAB_CACHE/locks/, a host folder that containers mount too, so runs in
different containers and native runs on one GPU exclude each other. The kernel drops an flock
when its holder dies, so a crashed run never leaves a stale lock behind.
"""
from __future__ import annotations

import contextlib
import os
import re
import socket
import sys
from pathlib import Path
from typing import IO, Iterator


def lock_path(directory: Path, key: str) -> Path:
    return directory / "locks" / f"gpu-{re.sub(r'[^A-Za-z0-9._-]', '_', key)}.lock"


@contextlib.contextmanager
def gpu_lock(directory: Path, key: str, *, label: str = "", out: IO[str] | None = None) -> Iterator[Path]:
    """Hold the lock of GPU `key` (its UUID) for the block; wait, saying so, while another run has it."""
    try:
        import fcntl
    except ImportError:  # Windows: no flock; benchmarks there run unguarded
        yield Path(os.devnull)
        return
    path = lock_path(directory, key)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            f.seek(0)
            holder = f.read().strip() or "unknown pid"
            print(f"waiting for another benchmark on GPU {label or key} ({holder}) to finish ...",
                  file=out or sys.stderr, flush=True)
            fcntl.flock(f, fcntl.LOCK_EX)
        f.seek(0)
        f.truncate()
        f.write(f"pid {os.getpid()} on {socket.gethostname()}")
        f.flush()
        try:
            yield path
        finally:
            f.seek(0)
            f.truncate()
            fcntl.flock(f, fcntl.LOCK_UN)
