"""One named target: a `[target.NAME]` table of docker/targets.toml, checked and made a Target.

kernellab.image.targets reads the file and hands each table here; a recipe's inline target
(kernellab.recipes.build) and its `as_of` day (kernellab.recipes.read) are checked by the same code.
"""
from __future__ import annotations

import datetime
from dataclasses import dataclass, fields
from typing import Any

from ..errors import ConfigError


@dataclass(frozen=True)
class Target:
    """A named target from docker/targets.toml: a frozen choice of versions under a short name.

    A field left out (None or empty) is resolved to the newest compatible choice from matrix.toml.
    """

    name: str
    description: str = ""
    cuda: str | None = None
    gpu: tuple[str, ...] = ()
    torch: str | None = None
    python: str | None = None
    llvm: str | None = None
    llvm_role: str = "cuda"            # "cuda": clang compiles CUDA (checked against CUDA); "library": llvm-config only
    gcc: int | None = None
    os: str | None = None
    base: str | None = None            # an image with PyTorch, or an OS base such as debootstrap:<suite>
    toolkit: str | None = None         # where CUDA comes from: "image" or "pip"
    pip: tuple[str, ...] = ()          # extra packages
    apt: tuple[str, ...] = ()
    extras: tuple[str, ...] = ()       # optional parts from matrix.toml's [extra.NAME] tables, e.g. "jupyter"
    as_of: str | None = None           # "2023-01-31": pip packages not pinned resolve as of that day (the paper's time)
    default_for: str | None = None     # "cpu" or "gpu": what `invoke build-image` picks on such a machine
    rendered: bool = False             # its Dockerfile is committed under docker/rendered/NAME/
    nsys: bool | None = None           # false: no Nsight Systems in a CUDA image; true: refuse a kind that has none


#: The keys a [target.NAME] table may have.
TARGET_KEYS = tuple(f.name for f in fields(Target) if f.name != "name")
_STRING_KEYS = ("description", "cuda", "torch", "python", "llvm", "llvm_role", "os", "base", "toolkit")
LLVM_ROLES = ("cuda", "library")
_VERSION_KEYS = ("cuda", "torch", "python", "llvm")
_DEFAULT_FOR = ("cpu", "gpu")


def parse_target(name: str, table: Any) -> Target:
    """Check one [target.NAME] table and make it a Target; ConfigError (one sentence) if malformed."""
    where = f"target `{name}` in targets.toml"
    if not isinstance(table, dict):
        raise ConfigError(f"{where} must be a table (`[target.{name}]`), not {_shown(table)}.")
    unknown = sorted(set(table) - set(TARGET_KEYS))
    if unknown:
        raise ConfigError(f"{where} has unknown keys {unknown}; known keys: {sorted(TARGET_KEYS)}.")
    values: dict[str, Any] = {}
    for key, value in table.items():
        if key in _STRING_KEYS:
            if key == "llvm" and isinstance(value, int) and not isinstance(value, bool):
                value = str(value)  # a major version alone is unambiguous
            if not isinstance(value, str):
                why = " (quote versions: as a number, 3.10 is 3.1)" if key in _VERSION_KEYS else ""
                raise ConfigError(f"{where}: `{key}` must be a string such as {key} = \"{_example(key)}\", "
                                  f"not {_shown(value)}{why}.")
            if key == "llvm_role" and value not in LLVM_ROLES:
                raise ConfigError(f"{where}: `llvm_role` must be \"library\" (LLVM as a library: llvm-config, as TVM "
                                  f"uses it) or \"cuda\" (clang as a CUDA compiler), not {_shown(value)}.")
        elif key == "gcc":
            if isinstance(value, str) and value.isdigit():
                value = int(value)
            if not isinstance(value, int) or isinstance(value, bool):
                raise ConfigError(f"{where}: `gcc` must be a major version such as gcc = 12, not {_shown(value)}.")
        elif key in ("gpu", "pip", "apt", "extras"):
            if isinstance(value, str) and key == "gpu":
                value = [value]
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                raise ConfigError(f"{where}: `{key}` must be a list of strings such as {key} = [\"{_example(key)}\"], "
                                  f"not {_shown(value)}.")
            value = tuple(value)
        elif key == "default_for":
            if value not in _DEFAULT_FOR:
                raise ConfigError(f"{where}: `default_for` must be \"cpu\" or \"gpu\", not {_shown(value)}.")
        elif key == "as_of":
            value = as_of_date(value, where)
        elif key in ("rendered", "nsys"):
            if not isinstance(value, bool):
                raise ConfigError(f"{where}: `{key}` must be true or false, not {_shown(value)}.")
        values[key] = value
    return Target(name=name, **values)


def as_of_date(value: Any, where: str) -> str:
    """An `as_of` date (a TOML date or "YYYY-MM-DD") as "YYYY-MM-DD"; ConfigError (one sentence) otherwise."""
    if isinstance(value, datetime.date) and not isinstance(value, datetime.datetime):
        return value.isoformat()
    if isinstance(value, str):
        try:
            return datetime.date.fromisoformat(value.strip()).isoformat()
        except ValueError:
            pass
    raise ConfigError(f"{where}: `as_of` must be a day such as as_of = 2021-06-17 (the paper's time: pip packages "
                      f"not pinned resolve as of that day), not {_shown(value)}.")


def _shown(value: Any) -> str:
    return f"{type(value).__name__} {value!r}"


def _example(key: str) -> str:
    return {"cuda": "12.4", "torch": "2.5.1", "python": "3.11", "llvm": "17", "os": "ubuntu22.04",
            "base": "debootstrap:bookworm", "toolkit": "image", "description": "what it is for",
            "gpu": "a100", "pip": "scipy", "apt": "cmake", "extras": "jupyter"}.get(key, "...")
