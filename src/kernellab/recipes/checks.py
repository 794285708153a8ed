"""A recipe's requirements, checked before anything is built: each refusal one sentence with the remedy."""
from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Sequence

from ..errors import RecipeError
from ..gpu import HostGpu
from ..image.spec import Spec
from .model import Recipe

GB = 1024 ** 3


def host_ram_gb() -> float:
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / GB


def free_disk_gb(path: Path) -> float:
    while not path.exists():
        path = path.parent
    return shutil.disk_usage(path).free / GB


def _sm(cc: str) -> str:
    return "sm_" + cc.replace(".", "")


def check_target(recipe: Recipe, spec: Spec) -> None:
    """The target builds only for archs the recipe's code supports, and has CUDA when the code needs it."""
    supported = recipe.requirements.archs
    if not supported or spec.cuda is None and recipe.requirements.cpu:
        return  # any target; or a CPU one for a recipe that also runs on CPU (its CPU experiments)
    shown = ", ".join(_sm(a) for a in supported)
    if not spec.ccs or spec.cuda is None:
        raise RecipeError(f"recipe {recipe.name} is GPU code ({shown}) and target {spec.target or '(inline)'} has no "
                          f"CUDA; use a CUDA target (`invoke recipe build {recipe.name} --target cu124-debian`).")
    extra = [cc for cc in spec.ccs if cc.rstrip("af") not in supported]
    if extra:
        raise RecipeError(f"target {spec.target or '(inline)'} builds for {', '.join(_sm(c) for c in extra)}, which "
                          f"recipe {recipe.name}'s code does not support (it supports {shown}); choose a target whose "
                          f"GPUs are among those, or an inline [environment.target] with such a gpu list.")


def check_host(recipe: Recipe, *, gpus: Sequence[HostGpu], disk: Path | None = None, run: bool = False,
               cuda: bool = True) -> list[str]:
    """RAM and disk for a build, GPU arch and memory for a run; refusals raise, what is only noted is returned.
    cuda=False: a CPU target, whose run needs no GPU."""
    req = recipe.requirements
    notes: list[str] = []
    if req.ram_gb and host_ram_gb() < req.ram_gb:
        raise RecipeError(f"recipe {recipe.name} needs {req.ram_gb:g} GB of host RAM and this machine has "
                          f"{host_ram_gb():.1f} GB; run it on a larger machine (or `--on slurm`).")
    if req.disk_gb and disk is not None and free_disk_gb(disk) < req.disk_gb:
        raise RecipeError(f"recipe {recipe.name} needs {req.disk_gb:g} GB free for its build (beyond its target "
                          f"image) and {disk} has {free_disk_gb(disk):.1f} GB; free some (`docker system prune`) or "
                          f"move the engine's data.")
    if not req.archs or not cuda:
        return notes
    if not gpus:
        if run:
            raise RecipeError(f"recipe {recipe.name} runs on an NVIDIA GPU ({', '.join(_sm(a) for a in req.archs)}) "
                              f"and this machine has none; run it on a GPU machine (or `--on slurm`).")
        notes.append(f"no GPU here: building works, running needs one of {', '.join(_sm(a) for a in req.archs)}")
        return notes
    for g in gpus:
        if g.compute_capability not in req.archs:
            msg = (f"GPU {g.index} ({g.name}, {_sm(g.compute_capability)}) is not one recipe {recipe.name}'s code "
                   f"supports ({', '.join(_sm(a) for a in req.archs)})")
            if run:
                raise RecipeError(f"{msg}; run on such a GPU (--gpu-index N picks one).")
            notes.append(msg)
        elif req.gpu_memory_gb and g.memory_mib / 1024 < req.gpu_memory_gb:
            msg = (f"GPU {g.index} ({g.name}) has {g.memory_mib / 1024:.0f} GB and recipe {recipe.name} needs "
                   f"{req.gpu_memory_gb:g} GB")
            if run:
                raise RecipeError(f"{msg}; run on a larger GPU (--gpu-index N picks one).")
            notes.append(msg)
    return notes
