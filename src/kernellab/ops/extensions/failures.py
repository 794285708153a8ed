"""Failed builds: remembering them, explaining them, and working around torch's versioner after one. A
failure is kept per build folder with its inputs' fingerprint (kernellab.ops.extensions.sources), in this
process and, for compile errors, in the folder's `failure.json`, so unchanged sources raise the same error
again without compiling; transient compiler deaths (out of memory, a killed job) are not kept. A
compile error becomes an ExtensionError with the compiler's own lines, an undefined symbol at load one with
the symbol demangled. When torch's in-process versioner skipped ninja and tried to load a library that was
never built, `_force_rebuild` makes it compile for real.
"""
from __future__ import annotations

import contextlib
import json
import re
import time
from pathlib import Path
from typing import Any

from ...errors import ExtensionError
from ..compilerlog import compiler_messages, demangle
from .folder import _write_json

#: In the build folder: the last failed build's fingerprint and error, while its inputs are unchanged.
FAILURE_RECORD = "failure.json"

_UNDEFINED = re.compile(r"undefined symbol: (\S+)")
#: Compile failures that say nothing about the sources: a retry may well succeed, so none is remembered.
#: (A compiler that crashed, "Segmentation fault": Debian's nvcc 12.4 once did, under --split-compile, in CI.)
_TRANSIENT = re.compile(r"Killed signal|died due to signal|internal compiler error|No space left on device|"
                        r"virtual memory exhausted|Cannot allocate memory|out of memory|Segmentation fault",
                        re.IGNORECASE)

#: A compiler that died on its own (not the sources' error): the build is tried once more at once.
CRASHED = re.compile(r"Segmentation fault|internal compiler error|died due to signal", re.IGNORECASE)

#: Failures remembered in this process, by build folder: (fingerprint, message).
_FAILED: dict[Path, tuple[str, str]] = {}


def _known_failure(directory: Path, fingerprint: str) -> str | None:
    """The message of the failed build of these very inputs, from this process or from the folder's record."""
    remembered = _FAILED.get(directory)
    if remembered is not None and remembered[0] == fingerprint:
        return remembered[1]
    try:
        record = json.loads((directory / FAILURE_RECORD).read_text())
    except (OSError, ValueError):
        return None
    if isinstance(record, dict) and record.get("fingerprint") == fingerprint and isinstance(record.get("message"), str):
        _FAILED[directory] = (fingerprint, record["message"])
        return record["message"]
    return None


def _remember_failure(directory: Path, fingerprint: str, error: ExtensionError, failure: BaseException,
                      log: str) -> None:
    """Keep a failure that the same inputs would meet again; forget one that a retry may not meet."""
    compile_error = _is_compile_error(failure) and not _TRANSIENT.search(log)
    # In this process also an undefined symbol: retrying its load would only fail the same way.
    if not (compile_error or _UNDEFINED.search(f"{failure} {failure.__cause__ or ''}")):
        _forget_failure(directory)
        return
    _FAILED[directory] = (fingerprint, str(error))
    if compile_error:
        # On disk too, so the next process (the next pytest, `invoke bench` after `invoke test`) gets
        # the compiler's error at once instead of compiling the same sources again to meet it.
        # Only compile errors: the fingerprint holds what a compiler reads, not what a loader finds.
        record = {"fingerprint": fingerprint, "message": str(error),
                  "when": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
        _write_json(directory / FAILURE_RECORD, record)  # read-only cache: the in-process memory still has it


def _is_compile_error(failure: BaseException) -> bool:
    return str(failure).startswith("Error building extension")


def _forget_failure(directory: Path) -> None:
    _FAILED.pop(directory, None)
    with contextlib.suppress(OSError):
        (directory / FAILURE_RECORD).unlink()


def _versioner() -> Any:
    """torch's in-process record of each extension's source hash and version (None if torch changed it)."""
    from torch.utils import cpp_extension

    versioner = getattr(cpp_extension, "JIT_EXTENSION_VERSIONER", None)
    return versioner if isinstance(getattr(versioner, "entries", None), dict) else None


def _rebuild_skipped(name: str, directory: Path) -> bool:
    """True when the library torch just tried to load does not exist: it ran no build, or one that failed
    elsewhere. (A compile failure of its own raises before loading, and is not this.)"""
    versioner = _versioner()
    if versioner is None:
        return False
    version = versioner.get_version(name)
    stem = f"{name}_v{version}" if version else name
    return not any((directory / f"{stem}{suffix}").exists() for suffix in (".so", ".dylib", ".pyd"))


def _force_rebuild(name: str) -> None:
    # A stale hash makes cpp_extension run ninja again, under the next versioned name (name_vN):
    # a library of the old name may be loaded in this process already and cannot be replaced.
    versioner = _versioner()
    entry = versioner.entries.get(name) if versioner is not None else None
    if entry is not None:
        versioner.entries[name] = entry._replace(hash=None)


def _explain(name: str, error: BaseException, log: str, directory: Path) -> ExtensionError:
    text = str(error)
    if error.__cause__ is not None:  # torch.ops.load_library wraps the loader's OSError
        text += f": {error.__cause__}"
    if _is_compile_error(error):
        messages = compiler_messages(log) or text
        return ExtensionError(f"{name} does not compile:\n{messages}\n(full log: {directory / 'build.log'})")
    if m := _UNDEFINED.search(text):
        symbol = demangle([m.group(1)])[0]
        return ExtensionError(
            f"{name} built, but loading it failed: nothing defines `{symbol}`. The binding declares it and "
            "no kernel source defines it with that exact name, namespace and parameter types; "
            "declare it once in the op's header and include that header in both files."
        )
    return ExtensionError(f"{name} could not be built or loaded: {text.strip()}")
