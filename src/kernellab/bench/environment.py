"""Everything a result depends on, stamped into results.json so two runs can be told apart.

Inside a kernellab image the image's facts come from /etc/kernellab/ (spec.json and lock.json,
written at build time) and KERNELLAB_IMAGE_ID (set by the container runner); elsewhere the
image is "native".
"""
from __future__ import annotations

import hashlib
import json
import os
import platform
import socket
from pathlib import Path
from typing import Any

from .. import ROOT, envinfo
from ..ops import extensions
from ..provenance import Checkout

IMAGE_FACTS = Path("/etc/kernellab")


def collect(*, gpu: dict[str, Any] | None, root: Path = ROOT, facts: Path = IMAGE_FACTS) -> dict[str, Any]:
    """The software side (versions, pip freeze, image, git, arch flags) plus the GPU facts given."""
    software = envinfo.collect()
    versions = software["versions"]
    return {
        "host": socket.gethostname(),
        "platform": platform.platform(),
        "python": versions.get("python"),
        "torch": versions.get("torch"),
        "cuda_runtime": versions.get("torch_cuda"),
        "triton": versions.get("triton"),
        "nvcc": versions.get("nvcc"),
        "arch_flags": _arch_flags(),
        "image": image(facts),
        "git": git_state(root),
        "gpu": gpu,
        "versions": versions,
        "pip_freeze": software["pip_freeze"],
    }


def gpu_facts(clock_facts: dict[str, Any] | None) -> dict[str, Any]:
    """Name, UUID, compute capability, SMs, L2, memory of the current CUDA device, plus NVML facts.

    clock_facts are the reader's facts about the same GPU, opened by the UUID torch reports
    (clocks.open_probe): NVML's and CUDA's numbering differ wherever a container or
    CUDA_VISIBLE_DEVICES shows only some GPUs, so only the UUID says which GPU this is.
    """
    import torch

    torch_index = torch.cuda.current_device()
    p = torch.cuda.get_device_properties(torch_index)
    uuid = str(getattr(p, "uuid", "") or "") or None
    clock_facts = dict(clock_facts or {})
    facts: dict[str, Any] = {
        "name": p.name,
        "uuid": uuid,
        "compute_capability": f"{p.major}.{p.minor}",
        "sm_count": p.multi_processor_count,
        "l2_bytes": getattr(p, "L2_cache_size", None),
        "memory_bytes": p.total_memory,
        # The host's number for this GPU (its /dev/nvidia<N>, nvidia-smi's index on the usual host), the
        # same inside a container that shows it as device 0; None where no reader could say.
        "index": clock_facts.pop("minor_number", None),
        "torch_index": torch_index,
        "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
    }
    if clock_facts:
        facts["driver"] = clock_facts.get("driver")
        facts["clocks"] = {k: v for k, v in clock_facts.items() if k != "driver"}
    return facts


def _arch_flags() -> dict[str, Any]:
    flags: dict[str, Any] = {"TORCH_CUDA_ARCH_LIST": os.environ.get("TORCH_CUDA_ARCH_LIST"),
                             "nvcc_flags": list(extensions.cuda_flags()), "cxx_flags": list(extensions.CXX_FLAGS)}
    try:
        import torch
    except ImportError:
        return flags
    if torch.cuda.is_available():
        flags["torch_arch_list"] = torch.cuda.get_arch_list()
    return flags


def image(facts: Path = IMAGE_FACTS) -> dict[str, Any] | str:
    """The kernellab image's ID, lock hash and spec, or "native" outside one."""
    spec_file, lock_file = facts / "spec.json", facts / "lock.json"
    image_id = os.environ.get("KERNELLAB_IMAGE_ID")
    if not spec_file.exists() and not image_id:
        return "native"
    return {"id": image_id, "lock_sha256": _lock_sha256(lock_file), "spec": _json(spec_file),
            "nvcc_gencode": os.environ.get("KERNELLAB_NVCC_GENCODE")}


def _json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _lock_sha256(lock_file: Path) -> str | None:
    # The same digest as the image's kernellab.lock-sha256 label (locks.lock_digest), computed
    # here because importing kernellab.image.builder needs packages an image need not have.
    lock = _json(lock_file)
    return hashlib.sha256(json.dumps(lock, sort_keys=True).encode()).hexdigest() if lock is not None else None


def git_state(root: Path = ROOT) -> dict[str, str | bool | None]:
    """Commit and dirty flag of the checkout (kernellab.provenance.Checkout, the one reader of it; no tree: a bench
    run does not write the repository's objects)."""
    return Checkout.here(root, tree=False).to_dict()


def differences(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """What differs between two runs' environments in ways that move timings."""
    def get(env: dict[str, Any], *path: str) -> Any:
        for key in path:
            env = env.get(key) if isinstance(env, dict) else None  # type: ignore[assignment]
        return env

    def image_key(env: dict[str, Any]) -> Any:
        img = env.get("image")
        return img if isinstance(img, str) else (img or {}).get("lock_sha256") or (img or {}).get("id")

    checks = [
        ("GPU", lambda e: get(e, "gpu", "name")),
        ("GPU UUID", lambda e: get(e, "gpu", "uuid")),
        ("driver", lambda e: get(e, "gpu", "driver")),
        ("image", image_key),
        ("torch", lambda e: e.get("torch")),
        ("CUDA runtime", lambda e: e.get("cuda_runtime")),
        ("triton", lambda e: e.get("triton")),
        ("clock lock", lambda e: get(e, "clock_lock", "locked")),
    ]
    out = []
    for label, read in checks:
        a, b = read(old), read(new)
        if a != b:
            out.append(f"{label}: {a} -> {b}")
    return out
