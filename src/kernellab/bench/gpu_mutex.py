"""One benchmark (or `invoke profile`, `invoke sanitize`) per GPU at a time: a second run waits for the
first and says who holds the GPU.

(Not to be confused with an image's lock, docker/locks/<target>.json: that pins packages.)
The mutex is an flock on a file under $KERNELLAB_CACHE/locks/, a host folder that containers
mount too, so runs in different containers and native runs on one GPU exclude each other. The
kernel drops an flock when its holder dies, so a crashed run never leaves a stale mutex behind.
"""
from __future__ import annotations

import contextlib
import os
import re
import socket
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import IO


def mutex_path(directory: Path, key: str) -> Path:
    """The file whose flock is the mutex of GPU `key` under cache folder `directory`."""
    return directory / "locks" / f"gpu-{re.sub(r'[^A-Za-z0-9._-]', '_', key)}.lock"


@contextlib.contextmanager
def exclusive_gpu(directory: Path, key: str, *, label: str = "", out: IO[str] | None = None) -> Iterator[Path]:
    """Have GPU `key` (its UUID) to this run for the block; wait, saying so, while another run has it."""
    try:
        import fcntl
    except ImportError:  # Windows: no flock; benchmarks there run unguarded
        yield Path(os.devnull)
        return
    path = mutex_path(directory, key)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            f.seek(0)
            holder = f.read().strip() or "unknown pid"
            print(f"waiting for another benchmark, profile or sanitize run on GPU {label or key} ({holder}) to finish ...",
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
