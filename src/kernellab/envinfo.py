"""Describe the software environment this Python runs in, as JSON (stdlib only).

Run inside an image after a build (`python envinfo.py`) to write the lock, and by the benchmark
to stamp results. Every probe is best-effort: a missing tool is recorded as null.
"""
from __future__ import annotations

import json
import platform
import re
import shutil
import subprocess
import sys
from typing import Any, Iterable


def _out(argv: list[str]) -> str | None:
    if shutil.which(argv[0]) is None:
        return None
    try:
        p = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return p.stdout.strip() if p.returncode == 0 else None


def _nvcc() -> str | None:
    text = _out(["nvcc", "--version"]) or ""
    m = re.search(r"release ([\d.]+), V([\d.]+)", text)
    return m.group(2) if m else None


def _clang() -> dict[str, str]:
    found = {}
    for n in range(30, 5, -1):
        text = _out([f"clang-{n}", "--version"])
        if text:
            m = re.search(r"version ([\d.]+)", text)
            found[str(n)] = m.group(1) if m else text.splitlines()[0]
    return found


def _os_release() -> str | None:
    try:
        with open("/etc/os-release") as f:
            for line in f:
                if line.startswith("PRETTY_NAME="):
                    return line.split("=", 1)[1].strip().strip('"')
    except OSError:
        pass
    return None


def _torch() -> dict[str, Any]:
    try:
        import torch
    except Exception as e:  # an image without torch is still described
        return {"torch": None, "error": f"{type(e).__name__}: {e}"}
    info: dict[str, Any] = {"torch": torch.__version__, "torch_cuda": torch.version.cuda}
    try:
        info["cudnn"] = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
    except Exception:
        info["cudnn"] = None
    try:
        import triton
        info["triton"] = triton.__version__
    except Exception:
        info["triton"] = None
    return info


def collect() -> dict[str, Any]:
    """The environment as a JSON-able dict (pip freeze and Debian packages sorted, versions of every toolchain)."""
    freeze = _out([sys.executable, "-m", "pip", "freeze", "--all"]) or ""
    versions: dict[str, Any] = {
        "python": platform.python_version(),
        "os": _os_release(),
        "gcc": _out(["gcc", "-dumpfullversion"]),
        "nvcc": _nvcc(),
        "clang": _clang(),
        "ninja": _out(["ninja", "--version"]),
        "ccache": (_out(["ccache", "--version"]) or "").split("\n")[0] or None,
    }
    versions.update(_torch())
    # pip itself is the venv's; setuptools and wheel are recorded: a dependency may upgrade setuptools,
    # and torch.utils.cpp_extension builds with it.
    skip = ("pip==",)
    dpkg = _out(["dpkg-query", "-W", "-f", "${Package}=${Version}\n"]) or ""
    return {
        "debian_packages": sorted(line for line in dpkg.splitlines() if line),
        "versions": versions,
        "pip_freeze": sorted((line for line in freeze.splitlines() if line and not line.startswith(skip)),
                             key=str.lower),
    }


#: pip's report of a recipe image's pip layer (`pip install --report`), kept in the image: which wheel was installed.
PIP_REPORT = "/etc/kernellab/recipe-pip-report.json"


def wheels(report: str, names: Iterable[str]) -> dict[str, dict[str, str]]:
    """The named distributions as pip's report says it installed them: {name as given: {version, sha256 of the
    wheel}}; names compare as pip does (liger-kernel is liger_kernel). Not a report: {}."""
    try:
        installed = json.loads(report).get("install", [])
    except (ValueError, AttributeError):
        return {}
    want = {_canonical(n): n for n in names}
    found = {}
    for item in installed:
        meta = item.get("metadata", {})
        name = want.get(_canonical(str(meta.get("name", ""))))
        if name:
            archive = (item.get("download_info") or {}).get("archive_info") or {}
            sha = (archive.get("hashes") or {}).get("sha256") or str(archive.get("hash", "")).removeprefix("sha256=")
            found[name] = {"version": str(meta.get("version", "")), "sha256": sha}
    return found


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


if __name__ == "__main__":
    json.dump(collect(), sys.stdout, indent=2, sort_keys=True)
    sys.stdout.write("\n")
