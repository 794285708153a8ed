"""The values a recipe's commands may use, from the resolved spec and one look inside the target image.

`{cuda_archs}` is "80;90" (CMake's CUDA_ARCHITECTURES), `{torch_arch_list}` "8.0;9.0" (TORCH_CUDA_ARCH_LIST),
`{cxx11_abi}` the image's torch C++ ABI (0 or 1), `{jobs}` parallel build jobs, `{python}` the image's Python,
`{llvm_config}` its llvm-config: nobody hand-edits `-DCUDAARCHS` again.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

from .. import cache_root, proc
from ..engine import Engine
from ..errors import RecipeError
from ..image.spec import Spec

#: The values of one build: a name of KNOWN -> its text, or a number ({jobs}).
Values = dict[str, str | int]

#: Every value a build step may use, with what it means (`invoke recipe check` prints them).
KNOWN = {
    "cuda_archs": "the target's CUDA archs the recipe supports, CMake style: 80;90",
    "torch_arch_list": "the same archs, TORCH_CUDA_ARCH_LIST style: 8.0;9.0",
    "gencode": "the same archs as nvcc -gencode flags",
    "sm": "the same archs as sm_80,sm_90",
    "cxx11_abi": "the image's torch C++ ABI: 1 (new) or 0 (old), for -D_GLIBCXX_USE_CXX11_ABI",
    "jobs": "parallel build jobs (this machine's cores)",
    "python": "the image's Python interpreter",
    "python_version": "its version, such as 3.12",
    "torch": "the image's torch version",
    "cuda": "the target's CUDA version (none for CPU targets)",
    "cuda_home": "the CUDA toolkit's folder in the image",
    "use_cuda": "ON where the target has CUDA, else OFF (CMake style, as TVM's USE_CUDA)",
    "llvm_config": "the image's llvm-config (empty where it has none)",
    "cuda_stub": "the toolkit's link-time libcuda.so stub, for CMake's CUDA_CUDA_LIB (empty where it has none)",
}

#: The values read from the target's image (the probe below); the rest follow from the spec.
FROM_IMAGE = ("cxx11_abi", "python", "python_version", "torch", "llvm_config", "cuda_stub")

_PROBE = r"""
import glob, json, shutil, sys, sysconfig
out = {"python": sys.executable, "python_version": "%d.%d" % sys.version_info[:2], "torch": "", "cxx11_abi": "",
       "cuda_home": ""}
try:
    import torch
    out["torch"] = torch.__version__.split("+")[0]
    out["cxx11_abi"] = str(int(torch._C._GLIBCXX_USE_CXX11_ABI))
    from torch.utils import cpp_extension
    out["cuda_home"] = cpp_extension.CUDA_HOME or ""
except Exception:
    pass
found = shutil.which("llvm-config") or sorted(glob.glob("/usr/bin/llvm-config-*") + glob.glob("/usr/lib/llvm-*/bin/llvm-config"))[-1:]
out["llvm_config"] = found if isinstance(found, str) else (found[0] if found else "")
stubs = [p for home in (out["cuda_home"], "/usr/local/cuda", "/usr") if home
         for p in glob.glob(home + "/lib*/stubs/libcuda.so") + glob.glob(home + "/lib/*-linux-gnu/stubs/libcuda.so")]
out["cuda_stub"] = stubs[0] if stubs else ""
print(json.dumps(out))
"""


#: Raised whenever _PROBE learns a new fact, so that an image probed before is probed again.
PROBE_VERSION = "v2"


def archs(spec: Spec) -> tuple[str, ...]:
    """The spec's compute capabilities (without arch-specific suffixes), ascending; the recipe's requirements
    check (kernellab.recipes.checks) has made sure the recipe's code supports each."""
    return tuple(sorted({cc.rstrip("af") for cc in spec.ccs}, key=lambda v: tuple(int(x) for x in v.split("."))))


def probe(image_id: str, eng: Engine) -> dict[str, str]:
    """What the image's Python says about itself (cached per image ID: an image never changes)."""
    cache = cache_root() / "recipes" / "probes" / f"{PROBE_VERSION}-{image_id.replace(':', '-')}.json"
    if cache.is_file():
        return dict(json.loads(cache.read_text()))
    argv = eng.probe_argv(image_id, ["-c", _PROBE], entrypoint="python3")
    r = proc.run(argv, check=False, timeout=300)
    if not r.ok:
        raise RecipeError(f"the image {image_id[:19]} has no working python3 for the recipe's values "
                          f"({(r.stderr or r.stdout).strip()[-200:]}); use a target with Python.")
    facts = json.loads(r.stdout.strip().splitlines()[-1])
    cache.parent.mkdir(parents=True, exist_ok=True)
    cache.write_text(json.dumps(facts, sort_keys=True))
    return dict(facts)


def values(spec: Spec, facts: dict[str, str], jobs: int | None = None) -> Values:
    """Every KNOWN value for this spec and image."""
    ccs = archs(spec)
    nums = [cc.replace(".", "") for cc in ccs]
    out: Values = {
        "cuda_archs": ";".join(nums),
        "torch_arch_list": ";".join(ccs),
        "gencode": " ".join(f"-gencode=arch=compute_{n},code=sm_{n}" for n in nums),
        "sm": ",".join(f"sm_{n}" for n in nums),
        "jobs": jobs or int(os.environ.get("KERNELLAB_JOBS") or os.cpu_count() or 1),
        "cuda": spec.cuda or "none",
        "use_cuda": "ON" if spec.cuda else "OFF",
        **facts,
    }
    out["cuda_home"] = facts.get("cuda_home") or spec.cuda_home or ""
    missing = sorted(set(KNOWN) - set(out))
    assert not missing, missing
    return out


def shown(vals: Values) -> str:
    return "\n".join(f"  {{{k}}} = {vals[k]}" for k in KNOWN)


def context_dir(recipe: str) -> Path:
    """Where a recipe's build context, build logs and state live on this machine."""
    return cache_root() / "recipes" / recipe
