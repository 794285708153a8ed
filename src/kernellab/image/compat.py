"""Can an image run here: a GPU's compute capability against an image's arch list, a driver against its
CUDA. The one home of these rules; doctor (this machine), transfer (a receiving machine's fingerprint),
the cluster (a profile's GPU types) and the kinds (what a target builds for) all ask it.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterable

from .targets import vkey

OK, INFO, WARN, FAIL = "ok", "info", "warn", "fail"


@dataclass(frozen=True)
class Finding:
    name: str
    severity: str
    message: str
    remedy: str = ""


def driver_finding(driver: str, cuda: str, min_driver: str | None, mvc_driver: str | None) -> Finding:
    """Compare a driver version with a CUDA toolkit's needs."""
    if min_driver and vkey(driver) >= vkey(min_driver):
        return Finding("driver", OK, f"driver {driver} runs CUDA {cuda} (needs {min_driver})")
    if mvc_driver and vkey(driver) >= vkey(mvc_driver):
        return Finding("driver", WARN, f"driver {driver} runs CUDA {cuda} only through minor-version compatibility "
                       f"(full support from {min_driver}); PTX JIT of newer code fails",
                       "ship SASS for the GPU (the image's arch list does) or update the driver")
    return Finding("driver", FAIL, f"driver {driver} is too old for CUDA {cuda} (needs {min_driver})",
                   f"update the driver to {min_driver}+ or choose an older --cuda")


def arch_finding(ccs: list[str], arch_list: str, cpu_only: bool = False) -> Finding:
    """Whether every GPU capability is covered by an image's TORCH_CUDA_ARCH_LIST.

    The list may be separated by ";" (the variable), spaces or commas (as image labels have it).
    """
    if cpu_only:
        return Finding("arch coverage", WARN, "the target is CPU-only: the GPU will not be used",
                       "build a GPU target, e.g. `invoke build-image --target cu130-pip`")
    archs = arch_list.replace(";", " ").replace(",", " ").split()
    missing = sorted({cc for cc in ccs if not covers(archs, cc)}, key=vkey)
    if missing:
        return Finding("arch coverage", FAIL, f"GPU capability {', '.join(missing)} is not in the arch list {arch_list}",
                       f"rebuild with --gpu for this GPU (e.g. --gpu sm_{missing[0].replace('.', '')})")
    return Finding("arch coverage", OK, f"every GPU is covered by {arch_list}")


_ARCH = re.compile(r"(?:sm_|compute_)?(\d+)\.?(\d)([af]?)(\+PTX)?", re.IGNORECASE)


def covers(archs: Iterable[str], cc: str) -> bool:
    """Whether code built for archs (TORCH_CUDA_ARCH_LIST entries: "8.6", "9.0a", "12.0+PTX", "sm_90")
    runs on a GPU of compute capability cc.

    SASS runs on the same major at an equal or newer minor (arch-specific "a"/"f" builds only on
    their own capability); PTX is JIT-compiled by the driver for any newer GPU.
    """
    have = tuple(int(p) for p in re.findall(r"\d+", str(cc)))[:2]
    if len(have) < 2:
        return False
    for token in archs:
        m = _ARCH.fullmatch(token.strip())
        if not m:
            continue
        built, specific, ptx = (int(m.group(1)), int(m.group(2))), bool(m.group(3)), bool(m.group(4))
        if built == have or (not specific and built[0] == have[0] and built[1] <= have[1]):
            return True
        if ptx and not specific and built <= have:
            return True
    return False
