"""Files on the local disk: partial folders, free space, and file system failures said as what to do."""
from __future__ import annotations

import errno
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..errors import TransferError


def guard(where: Path, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """fn(*args, **kwargs), with a file system failure said as what to do next."""
    try:
        return fn(*args, **kwargs)
    except OSError as e:
        raise disk_error(e, where, "writing") from None


def disk_error(e: OSError, where: Path, what: str) -> TransferError:
    if e.errno in (errno.ENOSPC, errno.EDQUOT):
        return TransferError(f"The disk holding {where} filled up during {what}; nothing was kept there — "
                             "free space or pass another folder and run it again.")
    return TransferError(f"Cannot write in {where} ({e.strerror or e}); pass a folder you can write to.")


def mb(n: int) -> str:
    return f"{n / 1e6:,.1f} MB"


def fsync_dir(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def remove_stale_partials(out_dir: Path, name: str) -> None:
    """Remove what an export killed without a chance to clean up (e.g. SIGKILL) left behind."""
    for stale in out_dir.glob(f".{name}.partial-*"):
        pid = stale.name.rsplit("-", 1)[-1]
        if pid.isdigit() and not _alive(int(pid)):
            shutil.rmtree(stale, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def output_file(bundle: Path, output: Path | str | None, suffix: str) -> Path:
    """The file a conversion writes: --output, else ./BUNDLE.suffix; never one that exists."""
    out = Path(output) if output else Path.cwd() / f"{bundle.resolve().name}.{suffix}"
    if out.exists():
        raise TransferError(f"{out} already exists; delete it or pass another --output.")
    return out


def require_free(folder: Path, need: int, what: str) -> None:
    guard(folder, folder.mkdir, parents=True, exist_ok=True)
    free = shutil.disk_usage(folder).free
    if free < need:
        raise TransferError(f"{what} needs about {mb(need)} free in {folder} and it has "
                            f"{mb(free)}; free space or pass --output on a larger disk.")
