"""The calls a profiled child makes (`invoke profile`'s Nsight Compute child and its `--timeline` capture): an op's
implementations, a recipe's published system among them (`published`), each prepared for its pass as the bench times
it (kernellab.ops.passes.for_impl) at the op's bench inputs on the GPU and warmed up (`warmed_calls`). Nothing here
runs a tool; kernellab.nsight.profile and kernellab.nsight.op_timeline put the calls in their NVTX ranges.
"""
from __future__ import annotations

import contextlib
from typing import Any, Callable, ContextManager, Sequence

from ..errors import ProfileError
from ..ops.spec import OpSpec

#: Calls before the profiled one: JIT compiles, torch.compile, first-launch module loads, warm caches.
WARMUP = 3

#: (call, setup) of one implementation's pass (kernellab.ops.passes.for_impl): run setup, when there is one, first.
Call = tuple[Callable[[], Any], "Callable[[], Any] | None"]


def published(op: str, system: str | None) -> dict[str, Any]:
    """A recipe's published system as one more implementation (`invoke profile --against RECIPE`)."""
    if not system:
        return {}
    from ..bench import systems

    loaded = systems.load(systems.Offer.from_json(system))
    return {loaded.offer.name: loaded.baselines[op]} if op in loaded.baselines else {}


def warmed_calls(spec: OpSpec, impls: Sequence[str], shape: dict[str, int], dtype: str, system: str | None,
                 which: str) -> dict[str, Call]:
    """Each implementation's (call, setup) of pass `which` at the op's bench inputs on the GPU, every one run WARMUP
    times (setup before each call)."""
    from ..ops import library, passes

    module = library.load(spec)
    fns = {**module.candidates, **module.baselines, **published(spec.name, system)}
    seed = spec.seeds[0] if spec.seeds else 0
    inputs = module.make_inputs(shape, dtype, "cuda", seed)
    calls = {impl: passes.for_impl(module, impl, fns[impl], inputs, which, seed) for impl in impls}
    for call, setup in calls.values():
        for _ in range(WARMUP):
            if setup is not None:
                setup()
            call()
    return calls


def on_this_thread(which: str) -> ContextManager[Any]:
    """Where a pass launches its kernels on the calling thread, inside its NVTX ranges: autograd runs a CUDA backward
    on a thread of its own (ncu's range filter saw none of its kernels, nsys put them outside the calls), so for a
    backward or full pass its multithreading is turned off. A forward needs nothing (and runs on torch 1.13 too)."""
    import torch

    if which == "forward":
        return contextlib.nullcontext()
    if not hasattr(torch.autograd, "set_multithreading_enabled"):
        raise ProfileError(f"profiling a {which} pass needs torch 2.0 or later (autograd's "
                           f"set_multithreading_enabled); this image has torch {torch.__version__}.")
    return torch.autograd.set_multithreading_enabled(False)
