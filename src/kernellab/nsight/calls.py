"""The calls a profiled child makes (`invoke profile`'s Nsight Compute child and its `--timeline` capture): the call
chosen from the task's flags (`choose_shape`, `choose_dtype`, `choose_impls`, `check_pass`: a typo is one sentence) and
its files' names (`file_stem`); an op's implementations, a recipe's published system among them (`published`), each
prepared for its pass as the bench times it (kernellab.ops.passes.for_impl) at the op's bench inputs on the GPU and
warmed up (`warmed_calls`). Nothing here runs a tool; kernellab.nsight.profile and kernellab.nsight.op_timeline put the
calls in their NVTX ranges.
"""
from __future__ import annotations

import contextlib
from typing import Any, Callable, ContextManager, Sequence

from ..errors import ConfigError, ProfileError
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


# --------------------------------------------------------------------------- the call chosen


def choose_shape(spec: OpSpec, shape: str | None) -> dict[str, int]:
    """--shape: an index into the op's bench shapes, `k=v,k=v`, or the sizes in the order of the op's keys joined by
    x (`4096x1024`: rows=4096, cols=1024, as file names write a shape); default the first bench shape."""
    if shape is None:
        return dict(spec.bench_shapes[0])
    shape = shape.strip()
    if shape.isdigit():
        index = int(shape)
        if index >= len(spec.bench_shapes):
            raise ConfigError(f"--shape {shape}: {spec.name} has {len(spec.bench_shapes)} bench shapes "
                              f"(0 to {len(spec.bench_shapes) - 1}): {spec.bench_shapes}.")
        return dict(spec.bench_shapes[index])
    keys = list(spec.bench_shapes[0])
    form = "x".join(k.upper() for k in keys)
    try:
        if "=" in shape:
            pairs = dict(part.split("=", 1) for part in shape.split(","))
            chosen = {k.strip(): int(v) for k, v in pairs.items()}
        else:
            sizes = [int(v) for v in shape.lower().split("x")]
            if len(sizes) != len(keys):
                raise ConfigError(f"--shape {shape!r}: {spec.name}'s shapes have {len(keys)} sizes ({form}).")
            chosen = dict(zip(keys, sizes))
    except ValueError:
        raise ConfigError(f"--shape {shape!r}: give an index into the bench shapes, k=v,k=v or {form} with "
                          "integers.") from None
    want = set(keys)
    if set(chosen) != want:
        raise ConfigError(f"--shape {shape!r}: {spec.name}'s shapes have the keys {', '.join(sorted(want))}.")
    if any(v < 1 for v in chosen.values()):
        raise ConfigError(f"--shape {shape!r}: every size must be at least 1.")
    return {k: chosen[k] for k in keys}  # in the op's order, as file names write it


def choose_dtype(spec: OpSpec, dtype: str | None) -> str:
    """--dtype: one the op supports; default its first bench dtype."""
    chosen = dtype or spec.bench_dtypes[0]
    if chosen not in spec.dtypes:
        raise ConfigError(f"--dtype {chosen}: {spec.name} supports {', '.join(spec.dtypes)}.")
    return chosen


def choose_case(spec: OpSpec, shape: str | None, dtype: str | None, torch: Any) -> tuple[dict[str, int], str]:
    """The shape and dtype of the call to profile, then a check that a GPU is here (the input first: a typo is
    answered anywhere)."""
    chosen = choose_shape(spec, shape), choose_dtype(spec, dtype)
    if not torch.cuda.is_available():
        raise ProfileError("no GPU is visible here: profile on the GPU machine, natively or in a target whose "
                           "container gets the GPU (`invoke doctor` shows how it is passed).")
    return chosen


def choose_impls(spec: OpSpec, wanted: Sequence[str] | None, system: str | None = None,
                 which: str = "forward") -> list[tuple[str, str]]:
    """(name, role) for every candidate and baseline (and a recipe's published system), or those named with --impl;
    in a backward or full pass, the candidates without a backward (op.toml's [backward] candidates) left out, or
    refused when named."""
    backs = spec.backward.candidates if spec.backward and which != "forward" else None
    if backs is not None and wanted:
        for w in wanted:
            if w in spec.candidates and w not in backs:
                raise ConfigError(f"--impl {w}: {spec.name}'s candidate {w} has no backward (op.toml's [backward] "
                                  f"candidates: {', '.join(backs)}).")
    impls = [(n, "candidate") for n in spec.candidates if backs is None or n in backs]
    impls += [(n, "baseline") for n in spec.baselines]
    if system:
        from ..bench.systems import Offer

        offer = Offer.from_json(system)
        if spec.name not in offer.adapters:
            raise ConfigError(f"recipe {offer.name} offers no baseline for {spec.name} (it offers "
                              f"{', '.join(offer.adapters)}).")
        impls.append((offer.name, "published"))
    if not wanted:
        return impls
    names = [n for n, _ in impls]
    unknown = [w for w in wanted if w not in names]
    if unknown:
        raise ConfigError(f"--impl {unknown[0]}: {spec.name} has {', '.join(names)}.")
    return [(n, r) for n, r in impls if n in wanted]


def file_stem(spec: OpSpec, shape: dict[str, int], dtype: str, impl: str, which: str = "forward") -> str:
    dims = "x".join(str(v) for v in shape.values())
    return f"{spec.name}-{dims}-{dtype}-{impl}" + ("" if which == "forward" else f"-{which}")


def check_pass(spec: OpSpec, which: str) -> None:
    """--pass WHICH is one of the op's passes (backward and full only with a [backward]), else one sentence."""
    if which not in spec.passes:
        raise ConfigError(f"--pass {which}: {spec.name}'s passes are {', '.join(spec.passes)}"
                          + ("" if spec.backward else " (its op.toml declares no [backward])") + ".")
