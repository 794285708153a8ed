"""Resolve a request (flags and/or a named target) into a complete, frozen Spec, or refuse.

Each kind of image (kernellab.image.kinds) makes its own choices; this module turns flags and a named
target into a Request and hands it to the kind that claims it. Refusals raise ResolveError with one
sentence naming the conflict and the nearest valid choice (or the closest known name).
Nothing here touches Docker or the network: facts about a `--base-image` are passed in.
"""
from __future__ import annotations

import dataclasses
import functools
from typing import Sequence

from ..errors import ResolveError, UnfitError
from . import kinds
from .compat import covers
from .kinds import choose
from .spec import BaseFacts, Spec
from .target_table import Target, as_of_date
from .targets import Matrix, vkey


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
    """The refusal with the nearest pins that work: found by resolving candidates (CUDA, PyTorch, toolkit and Ubuntu
    near the request, nearest first), so every pin named resolves and its PyTorch wheel runs on every GPU asked for;
    where none does, what does instead (the toolkit alone, fewer GPUs), tried the same way. Where a fact comes from
    (choose.Unfit's detail) goes last, after the pins."""
    found = nearest_pins(matrix, req)
    gpus = ", ".join(g.name for g in req.gpus or ()) or "it"
    tail = f" ({why.detail})" if isinstance(why, choose.Unfit) and why.detail else ""
    if found is None:
        fixed = [f"{k} {v}" for k, v in (("target", req.target), ("python", req.python), ("gcc", req.gcc),
                                          ("llvm", req.llvm), ("base", req.base)) if v]
        rest = f"with {', '.join(fixed)}" if fixed else "as asked"
        error = ResolveError(f"{why} No CUDA, PyTorch, toolkit or Ubuntu in the matrix resolves {rest} for {gpus}"
                             f"{_instead(matrix, req)}{tail}.")
    else:
        error = ResolveError(f"{why} The nearest pins that resolve and run on {gpus}: {_shown(found)}{tail}.")
        error.pins = found
    return error


def _shown(pins: dict[str, str]) -> str:
    return " ".join(f"--{k} {v}" for k, v in pins.items())


def _instead(matrix: Matrix, req: kinds.Request) -> str:
    """What resolves instead of a request nothing near resolves: without PyTorch, or without one of several GPUs."""
    ways = []
    if not choose.no_torch(req.torch):
        alone = nearest_pins(matrix, dataclasses.replace(req, torch=choose.NO_TORCH))
        if alone:
            ways.append(f"the toolkit alone resolves: {_shown(alone)}")
    for gpu in req.gpus or () if len(req.gpus or ()) > 1 else ():
        fewer = nearest_pins(matrix, dataclasses.replace(req, gpus=tuple(g for g in req.gpus or () if g != gpu)))
        if fewer:
            ways.append(f"without {gpu.key}: {_shown(fewer)}")
    return "; " + "; ".join(ways) if ways else ""


def nearest_pins(matrix: Matrix, req: kinds.Request) -> dict[str, str] | None:
    """The CUDA, PyTorch, toolkit and Ubuntu pins nearest the request that resolve (None: none do). Nearest: fewest of
    the user's own pins changed, then the smallest step through the matrix's versions from each pin the user gave,
    then the fewest defaults left (another toolkit or Ubuntu than the default), then the smallest step from the
    newest for what the user left open; a plain PyTorch pin before one naming its wheel (2.8.0+cu126). Candidates
    that cannot work (a CUDA that cannot target a GPU, a PyTorch without a wheel of that CUDA's major for them) are
    not tried."""
    cudas = sorted(matrix.cuda, key=vkey)
    torches = sorted(matrix.torch, key=vkey)
    no_torch = choose.no_torch(req.torch)
    torch_pins: list[str | None] = [req.torch] if no_torch else [req.torch, *(
        pin for t in reversed(torches) for pin in (t, *(f"{t}+{v}" for v in matrix.torch[t].variants if v != "cpu")))]
    places = []   # (toolkit, OS, user's pins changed, steps from them, defaults left)
    for toolkit, os_ in _places(matrix, req):
        moves = (bool(req.toolkit) and toolkit != req.toolkit, bool(req.os) and os_ != req.os)
        places.append((toolkit, os_, sum(moves), moves[0] + (_os_step(matrix, req.os, os_) if moves[1] else 0),
                       (not req.toolkit and toolkit is not None) + (not req.os and os_ is not None)))
    position = functools.lru_cache(maxsize=None)(_position)
    candidates = []
    for cuda in dict.fromkeys([req.cuda, *reversed(cudas)]):
        for torch in dict.fromkeys(torch_pins):
            if not _plausible(matrix, req, cuda, torch):
                continue
            changed = mine = theirs = 0   # steps from the user's own pins; from the newest for what they left open
            for asked, value, order in ((req.cuda, cuda, cudas), (None if no_torch else req.torch, torch, torches)):
                if value is None or (order is torches and no_torch):
                    continue
                step = abs(position(tuple(order), value) - position(tuple(order), asked or order[-1]))
                if asked:
                    changed += value != asked
                    mine += step
                else:
                    theirs += step
            variant = torch is not None and "+" in torch and torch != req.torch
            for toolkit, os_, more, further, moved in places:
                if (cuda, torch, toolkit, os_) != (req.cuda, req.torch, req.toolkit, req.os):
                    candidates.append(((changed + more, mine + further, moved, theirs, variant), cuda, torch, toolkit, os_))
    for _, cuda, torch, toolkit, os_ in sorted(candidates, key=lambda c: c[0]):
        tried = dataclasses.replace(req, cuda=cuda, torch=torch, toolkit=toolkit, os=os_)
        try:
            spec = kinds.for_request(tried).resolve(matrix, tried)
        except ResolveError:
            continue
        pins = {"cuda": spec.cuda or ""}
        if spec.torch:
            pins["torch"] = torch if torch and "+" in torch else spec.torch
        elif no_torch:
            pins["torch"] = choose.NO_TORCH
        if toolkit != req.toolkit:
            pins["toolkit"] = toolkit or "image"
        if os_ != req.os and os_:
            pins["ubuntu"] = os_.removeprefix("ubuntu")
        return {k: v for k, v in pins.items() if v}
    return None


def _places(matrix: Matrix, req: kinds.Request) -> list[tuple[str | None, str | None]]:
    """The (toolkit, OS) pairs to try: the request's own first; then the default toolkit and the others (for a CUDA
    request that names no base image), and each Ubuntu (the only OS a flag names; a Debian toolkit brings its own),
    the nearest the request's first."""
    if req.gpus is None or req.base:
        return [(req.toolkit, req.os)]
    others = sorted({k.toolkit for k in kinds.REGISTRY.values() if k.toolkit} - {req.toolkit or "image", "image"})
    toolkits = list(dict.fromkeys([req.toolkit, None, *others]))
    ubuntus = sorted((o for o in matrix.os if matrix.os[o].family == "ubuntu"), key=lambda o: _os_step(matrix, req.os, o))
    return [(t, o) for t in toolkits for o in dict.fromkeys([req.os, *ubuntus]) if t != "debian" or o == req.os]


def _os_step(matrix: Matrix, asked: str | None, os_: str | None) -> int:
    """How far apart two Ubuntu releases are, in releases (0: the same, or no OS asked for)."""
    order = sorted((o for o in matrix.os if matrix.os[o].family == "ubuntu"), key=lambda o: vkey(o.removeprefix("ubuntu")))
    if not asked or not os_ or asked == os_ or asked not in order or os_ not in order:
        return 0 if asked == os_ or not asked else len(order)
    return abs(order.index(asked) - order.index(os_))


def _plausible(matrix: Matrix, req: kinds.Request, cuda: str | None, torch: str | None) -> bool:
    """Whether a candidate can work at all, judged from the matrix alone (cheap, before resolving it): its CUDA
    targets every GPU, and a pinned PyTorch has a wheel of that CUDA's major that runs on every GPU and the Python."""
    gpus = req.gpus or ()
    c = matrix.cuda.get(cuda) if cuda else None
    if c is not None and not all(g.cc in c.archs for g in gpus):
        return False
    if torch is None or choose.no_torch(torch) or req.gpus is None or req.base:
        return True
    try:
        t, asked = choose.pinned_torch(matrix, torch)
    except ResolveError:
        return False
    if req.python and not t.supports_python(str(req.python)):
        return False
    return any(v.startswith("cu") and (c is None or choose.same_major(v, c.variant))
               and all(covers(t.archs.get(v, ()), g.cc) for g in gpus) for v in ([asked] if asked else t.variants))


def _position(order: tuple[str, ...], pin: str) -> int:
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
