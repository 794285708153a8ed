"""Resolve a request (flags and/or a named target) into a complete, frozen Spec, or refuse.

Each kind of image (kernellab.image.kinds) makes its own choices; this module turns flags and a named
target into a Request and hands it to the kind that claims it. Refusals raise ResolveError with one
sentence naming the conflict and the nearest valid choice (or the closest known name).
Nothing here touches Docker or the network: facts about a `--base-image` are passed in.
"""
from __future__ import annotations

import dataclasses
from typing import Sequence

from ..errors import ResolveError
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
    )
    kind = kinds.for_request(req)
    spec = kind.resolve(matrix, req)
    if spec.as_of and matrix.pip_as_of_python and vkey(spec.python) < vkey(matrix.pip_as_of_python):
        raise ResolveError(f"as_of {spec.as_of} needs Python {matrix.pip_as_of_python} or newer ({matrix.pip_as_of} "
                           f"resolves as of a date), not {spec.python}; pin the packages instead, or use a newer Python.")
    return dataclasses.replace(spec, tag_parts=tuple(kind.tag_parts(spec)))


def _gcc_major(value: int | str) -> int:
    try:
        return int(value)
    except ValueError:
        raise ResolveError(f"--gcc takes a major version such as 12, not `{value}`.") from None
