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


def _version(v: str) -> tuple[int, ...]:
    return tuple(int(x) for x in v.split("."))


def check_target(recipe: Recipe, spec: Spec) -> None:
    """The target builds only for archs the recipe's code supports, with a CUDA at least as new as it needs, and has
    CUDA when the code needs it."""
    need = recipe.requirements.min_cuda
    if need and spec.cuda and _version(spec.cuda) < _version(need):
        raise RecipeError(f"recipe {recipe.name} needs CUDA {need} or newer (requirements.min_cuda) and target "
                          f"{spec.target or '(inline)'} has CUDA {spec.cuda}; choose a target with CUDA {need} or newer.")
    if need and not spec.cuda and not recipe.requirements.cpu:
        raise RecipeError(f"recipe {recipe.name} needs CUDA {need} or newer and target {spec.target or '(inline)'} "
                          f"has no CUDA; choose a target with CUDA {need} or newer.")
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
               built: Sequence[str] = ()) -> list[str]:
    """RAM and disk for a build, GPU arch and memory for a run; refusals raise, what is only noted is returned.

    built: the compute capabilities the target builds for (its spec's: what {cuda_archs} and {gencode} give the
    recipe's build); () for a CPU target (or a build), whose run needs no GPU. A run can use only those GPUs."""
    req = recipe.requirements
    notes: list[str] = []
    if req.ram_gb and host_ram_gb() < req.ram_gb:
        raise RecipeError(f"recipe {recipe.name} needs {req.ram_gb:g} GB of host RAM and this machine has "
                          f"{host_ram_gb():.1f} GB; run it on a larger machine (or `--on slurm`).")
    if req.disk_gb and disk is not None and free_disk_gb(disk) < req.disk_gb:
        raise RecipeError(f"recipe {recipe.name} needs {req.disk_gb:g} GB free for its build (beyond its target "
                          f"image) and {disk} has {free_disk_gb(disk):.1f} GB; free some (`docker system prune`) or "
                          f"move the engine's data.")
    archs = [cc.rstrip("af") for cc in built]
    if not archs:
        return notes
    held = ", ".join(_sm(a) for a in archs)
    if not gpus:
        if run:
            raise RecipeError(f"recipe {recipe.name}'s image holds GPU code for {held} and this machine has no GPU; "
                              f"run it on such a GPU (or `--on slurm`).")
        notes.append(f"no GPU here: building works, running needs a GPU it holds code for: {held}")
        return notes
    for g in gpus:
        cc = g.compute_capability
        if req.archs and cc not in req.archs:
            msg = (f"GPU {g.index} ({g.name}, {_sm(cc)}) is not one recipe {recipe.name}'s code supports "
                   f"({', '.join(_sm(a) for a in req.archs)})")
        elif cc not in archs:
            msg = (f"GPU {g.index} ({g.name}, {_sm(cc)}) is not one the recipe's image holds code for ({held}); "
                   f"build for it with --target of a target that lists its GPU")
        elif req.gpu_memory_gb and g.memory_mib / 1024 < req.gpu_memory_gb:
            msg = (f"GPU {g.index} ({g.name}) has {g.memory_mib / 1024:.0f} GB and recipe {recipe.name} needs "
                   f"{req.gpu_memory_gb:g} GB")
        else:
            continue
        if run:
            raise RecipeError(f"{msg}; run on another GPU (--gpu-index N picks one).")
        notes.append(msg)
    return notes


def check_gpu_mode(recipe: Recipe, spec: Spec, gpu_mode: bool | str) -> None:
    """--gpu-mode none gives the containers no GPU: refused where the target's image holds GPU code, whose every
    case would fail (a recipe that also runs on CPU has a CPU target for that)."""
    if gpu_mode is False and spec.cuda is not None:
        raise RecipeError(f"--gpu-mode none runs recipe {recipe.name}'s cases without a GPU, and target "
                          f"{spec.target or '(inline)'} builds GPU code (CUDA {spec.cuda}): every case would fail; run "
                          f"with a GPU" + (", or with --target cpu for its CPU experiments" if recipe.requirements.cpu
                                           else "") + ".")
