"""Can the receiving machine run this image: its driver against the image's CUDA, its GPUs against
the image's arch list. The rules are kernellab.image.compat's (`driver_finding`, `arch_finding`), applied to the
`invoke doctor --json` fingerprint of the other machine and the image's kernellab.* labels.
"""
from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..errors import KernellabError, TransferError
from ..image import targets
from ..image.compat import FAIL, INFO, OK, WARN, Finding, arch_finding, driver_finding

NAME = "receiving machine"  # every Finding here is about it


def load_fingerprint(path: Path | str) -> dict[str, Any]:
    """The JSON that `invoke doctor --json` printed on the receiving machine."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError) as e:
        raise TransferError(f"Cannot read the fingerprint {path} ({e}); save `invoke doctor --json` "
                            "from the receiving machine into a file and pass that.") from None
    if not isinstance(data, dict) or "gpus" not in data or "driver" not in data:
        raise TransferError(f"{path} is not a doctor fingerprint (no 'driver'/'gpus'); "
                            "save `invoke doctor --json` from the receiving machine and pass that.")
    return data


def covers(arch_list: str, capability: str) -> bool:
    """Whether kernels built for an image's arch-list label run on a GPU of this compute capability."""
    return arch_finding([capability], arch_list).severity == OK


def _mvc_driver(cuda: str | None) -> str | None:
    """The oldest driver that runs this CUDA through minor-version compatibility (the version matrix)."""
    try:
        known = targets.load().cuda.get(cuda or "")
    except KernellabError:
        return None
    return known.mvc_driver if known else None


def check_target(labels: Mapping[str, str], fingerprint: Mapping[str, Any]) -> list[Finding]:
    """Warnings for shipping an image with these labels to the machine of this fingerprint."""
    findings: list[Finding] = []
    cuda = labels.get("kernellab.cuda")
    driver = fingerprint.get("driver")
    gpus = fingerprint.get("gpus") or []
    if cuda == "none":
        return [Finding(NAME, INFO, "The image is CPU-only (kernellab.cuda=none); its GPUs will not be used.")]
    if not driver:
        findings.append(Finding(NAME, WARN, "The receiving machine reports no NVIDIA driver; CUDA code in the "
                                           "image will not run there until one is installed."))
    min_driver = labels.get("kernellab.min-driver")
    if not min_driver:
        findings.append(Finding(NAME, INFO, "The image has no kernellab.min-driver label; the driver was not checked."))
    elif driver:
        verdict = driver_finding(str(driver), cuda or "?", min_driver, _mvc_driver(cuda))
        if verdict.severity == FAIL:
            findings.append(Finding(NAME, WARN, f"The receiving driver {driver} is older than {min_driver}, which "
                                               f"CUDA {cuda or '?'} in the image needs; upgrade the driver there or "
                                               "ship a target with an older CUDA."))
        elif verdict.severity == WARN:
            findings.append(Finding(NAME, WARN, f"The receiving driver {driver} is older than {min_driver} and runs "
                                               f"CUDA {cuda} only through minor-version compatibility, where PTX JIT "
                                               f"of newer code fails; {verdict.remedy}."))
    arch_list = labels.get("kernellab.arch-list")
    if not arch_list:
        findings.append(Finding(NAME, INFO, "The image has no kernellab.arch-list label; GPU coverage was not checked."))
    else:
        for i, gpu in enumerate(gpus):
            cc = str(gpu.get("compute_capability", ""))
            if not covers(arch_list, cc):
                findings.append(Finding(
                    NAME, WARN, f"GPU {i} ({gpu.get('name', '?')}, compute capability {cc}) is not covered by "
                               f"the image's arch list {arch_list!r}: kernels would fail with 'no kernel image "
                               f"is available'; add {cc} to the target's arch list and rebuild."))
    return findings
