"""What a request leaves open, chosen to follow what it pins: the CUDA a pinned PyTorch's wheels were built for, the
OS that has the Python (gcc, LLVM) asked for.

The CUDA kinds try these candidates in order and keep the first with which the rest of the request resolves
(kernellab.image.kinds.cuda_image), so that a default never refuses what another default accepts.
"""
from __future__ import annotations

from typing import Sequence

from ...errors import ResolveError
from ..targets import Matrix, Os, vkey
from . import choose
from .base import Request


def cudas(matrix: Matrix, req: Request) -> list[str]:
    """The CUDA versions a request without --cuda tries, in order: those whose variant is one of a pinned PyTorch's
    wheels (the one it names, `2.0.1+cu117`, alone), newest first; then the rest, newest first (a wheel of the same
    CUDA major, as for a pinned CUDA). Versions that cannot target every GPU come last: they only give the refusal."""
    own: set[str] = set()
    if req.torch and not choose.no_torch(req.torch):
        try:
            torch, asked = choose.pinned_torch(matrix, req.torch)
        except ResolveError:
            torch, asked = None, ""
        own = {asked} if asked else set(torch.variants) if torch else set()
    gpus = req.gpus or ()
    return [c.version for c in sorted(matrix.cuda.values(), key=lambda c: (
        not all(g.cc in c.archs for g in gpus), c.variant not in own, [-n for n in vkey(c.version)]))]


def os_for(req: Request, oses: Sequence[Os]) -> Os:
    """The first of `oses` (the kind's order of preference) that has the Python, gcc and LLVM the request pins; the
    first of all when none has them (its refusal names what it has)."""
    def has(o: Os) -> bool:
        return ((not req.python or str(req.python) in o.pythons) and (req.gcc is None or req.gcc in o.gcc)
                and (req.llvm in (None, "", "none") or str(req.llvm) in o.llvms))
    return next((o for o in oses if has(o)), oses[0])
