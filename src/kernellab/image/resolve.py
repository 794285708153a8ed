"""Resolve a request (flags and/or a named target) into a complete, frozen Spec, or refuse.

Each kind of image (kernellab.image.kinds) makes its own choices; this module turns flags and a named
target into a Request and hands it to the kind that claims it. Refusals raise ResolveError with one
sentence naming the conflict and the nearest valid choice (or the closest known name).
Nothing here touches Docker or the network: facts about a `--base-image` are passed in.
"""
from __future__ import annotations

import dataclasses
from typing import Sequence

from ..errors import ResolveError, UnfitError
from . import kinds
from .kinds import choose
from .spec import BaseFacts, Spec
from .targets import Matrix, Target, as_of_date, vkey


def _list_arg(value: str | Sequence[str] | None) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        value = [value]
    return [p.strip() for v in value for p in v.split(",") if p.strip()]


def resolve(
    matrix: Matrix,
    *,
    target: str | None = None,
    cuda: str | None = None,
    gpu: str | Sequence[str] | None = None,
    torch: str | None = None,
    python: str | None = None,
    llvm: str | None = None,
    gcc: int | str | None = None,
    os: str | None = None,
    ubuntu: str | None = None,
    toolkit: str | None = None,
    base_image: str | None = None,
    base_facts: BaseFacts | None = None,
    torch_index: str | None = None,
    as_of: str | None = None,
    nsys: bool | None = None,
) -> Spec:
    """Complete a request with the newest compatible choices, or raise ResolveError.

    The kind that claims the request (kernellab.image.kinds) makes every choice. torch_index overrides
    the matrix's index for non-default torch variants ("" = none: the pip configuration alone must
    provide them, e.g. a mirror or find-links); kinds.torch_index.choose_index says which to pass.
    """
    if torch_index is not None:
        matrix = dataclasses.replace(matrix, torch_index=torch_index)
    t = Target(name="")
    if target:
        if target not in matrix.targets:
            raise ResolveError(f"unknown target `{target}`{choose.did_you_mean(target, matrix.targets)}; "
                               f"known targets: {', '.join(sorted(matrix.targets))}.")
        t = matrix.targets[target]
    # Explicit flags override the named target.
    gcc_major = _gcc_major(gcc) if gcc not in (None, "") else t.gcc
    req = kinds.Request(
        target=target, gpus=choose.gpus(matrix, _list_arg(gpu) or _list_arg(t.gpu)),
        cuda=cuda or t.cuda, torch=torch or t.torch, python=python or t.python,
        llvm=str(llvm) if llvm is not None else t.llvm, llvm_role=t.llvm_role, gcc=gcc_major,
        os=("ubuntu" + ubuntu if ubuntu else os) or t.os, toolkit=toolkit or t.toolkit,
        base=base_image or t.base, base_facts=base_facts, pip=t.pip, apt=t.apt, with_extras=t.extras,
        description=t.description, as_of=as_of_date(as_of, "--as-of") if as_of else t.as_of,
        nsys=t.nsys if nsys is None else nsys,
    )
    kind = kinds.for_request(req)
    try:
        spec = kind.resolve(matrix, req)
    except UnfitError as e:
        raise refusal(matrix, req, e) from None
    if spec.as_of and matrix.pip_as_of_python and vkey(spec.python) < vkey(matrix.pip_as_of_python):
        raise ResolveError(f"as_of {spec.as_of} needs Python {matrix.pip_as_of_python} or newer ({matrix.pip_as_of} "
                           f"resolves as of a date), not {spec.python}; pin the packages instead, or use a newer Python.")
    spec = with_nsys(matrix, kind, req, spec)
    return dataclasses.replace(spec, tag_parts=tuple(kind.tag_parts(spec)))


def with_nsys(matrix: Matrix, kind: kinds.Kind, req: kinds.Request, spec: Spec) -> Spec:
    """The spec with its Nsight Systems: the kind's pin for its CUDA unless the request says `nsys = false`; a request
    for one (`nsys = true`) where the kind or CUDA has none is refused, naming why."""
    cuda = matrix.cuda.get(spec.cuda) if spec.cuda else None
    version = kind.nsys(matrix, cuda) if cuda else None
    if req.nsys is False or (version is None and req.nsys is None):
        note = "none (nsys = false)" if req.nsys is False and cuda else kind.no_nsys(cuda) if cuda else "-"
        return dataclasses.replace(spec, nsys=None, nsys_note=note)
    if version is None:
        why = kind.no_nsys(cuda) if cuda else "a CPU image has no GPU to trace"
        raise ResolveError(f"a {kind.name} image of {f'CUDA {spec.cuda}' if spec.cuda else 'no CUDA'} carries no Nsight "
                           f"Systems of its own ({why}); drop `nsys = true`.")
    return dataclasses.replace(spec, nsys=version, nsys_note="")


def refusal(matrix: Matrix, req: kinds.Request, why: UnfitError) -> ResolveError:
    """The refusal with the nearest pins that work: found by resolving candidates (CUDA and PyTorch near the
    request, nearest first), so every pin named resolves and its PyTorch wheel runs on every GPU asked for."""
    found = nearest_pins(matrix, req)
    gpus = ", ".join(g.name for g in req.gpus or ())
    if found is None:
        way = "drop a GPU" + ("" if choose.no_torch(req.torch) else ", or use --torch none (the toolkit alone)")
        fixed = [f"{k} {v}" for k, v in (("target", req.target), ("os", req.os), ("toolkit", req.toolkit),
                                          ("python", req.python)) if v]
        error = ResolveError(f"{why} No CUDA and PyTorch in the matrix resolve with the rest of the request "
                             f"({', '.join(fixed) or 'as given'}) for {gpus or 'it'}; {way}.")
    else:
        shown = " ".join(f"--{k} {v}" for k, v in found.items())
        error = ResolveError(f"{why} The nearest pins that resolve and run on {gpus or 'it'}: {shown}.")
        error.pins = found
    return error


def nearest_pins(matrix: Matrix, req: kinds.Request) -> dict[str, str] | None:
    """The CUDA and PyTorch pins nearest the request that resolve (None: none do). Nearest: fewest of the user's own
    pins changed, then the smallest step through the matrix's versions from each pin the user gave, then from the
    newest for what the user left open; a plain PyTorch pin before one naming its wheel (2.8.0+cu126)."""
    cudas = sorted(matrix.cuda, key=vkey)
    torches = sorted(matrix.torch, key=vkey)
    no_torch = choose.no_torch(req.torch)
    torch_pins: list[str | None] = [req.torch] if no_torch else [req.torch, *(
        pin for t in reversed(torches) for pin in (t, *(f"{t}+{v}" for v in matrix.torch[t].variants)))]
    candidates = []
    for cuda in dict.fromkeys([req.cuda, *reversed(cudas)]):
        for torch in dict.fromkeys(torch_pins):
            if (cuda, torch) == (req.cuda, req.torch):
                continue
            mine = theirs = 0       # steps from the user's own pins; from the newest for what they left open
            changed = 0
            for asked, value, order in ((req.cuda, cuda, cudas), (None if no_torch else req.torch, torch, torches)):
                if value is None or (order is torches and no_torch):
                    continue
                step = abs(_position(order, value) - _position(order, asked or order[-1]))
                if asked:
                    changed += value != asked
                    mine += step
                else:
                    theirs += step
            variant = torch is not None and "+" in torch and torch != req.torch
            candidates.append(((changed, mine, theirs, variant), cuda, torch))
    for _, cuda, torch in sorted(candidates, key=lambda c: c[0]):
        tried = dataclasses.replace(req, cuda=cuda, torch=torch)
        try:
            spec = kinds.for_request(tried).resolve(matrix, tried)
        except ResolveError:
            continue
        pins = {"cuda": spec.cuda or ""}
        if spec.torch:
            pins["torch"] = torch if torch and "+" in torch else spec.torch
        elif no_torch:
            pins["torch"] = choose.NO_TORCH
        return {k: v for k, v in pins.items() if v}
    return None


def _position(order: list[str], pin: str) -> int:
    """Where a pin falls among the matrix's versions: its own place, the newest release it names ("2.8" for 2.8.0,
    "2.8.0+cu126" for 2.8.0), else where it would sort (an unknown "1.6" before 1.8.0)."""
    base = pin.partition("+")[0]
    named = [i for i, v in enumerate(order) if v == base or v.startswith(base + ".")]
    return named[-1] if named else sum(vkey(v) < vkey(base) for v in order)


def _gcc_major(value: int | str) -> int:
    try:
        return int(value)
    except ValueError:
        raise ResolveError(f"--gcc takes a major version such as 12, not `{value}`.") from None
