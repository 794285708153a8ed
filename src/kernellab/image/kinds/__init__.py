"""Target kinds: one module per kind of image, behind a small registry.

A kind owns its resolution (Request -> Spec), its base image (reference, how to make or pull it,
what doctor says), its tag and its template (docker/kinds/<name>.j2). Adding a kind is one module
here, one `register` line below and one template.
"""
from __future__ import annotations

from ...errors import ResolveError, UsageError
from . import base_image, cuda_debian, cuda_image, cuda_pip, debootstrap_cpu
from .base import BaseStatus, Kind, Request
from .choose import did_you_mean

#: Every kind by name, in the order they are asked to claim a request: the first claim wins.
REGISTRY: dict[str, Kind] = {}


def register(kind: Kind) -> Kind:
    REGISTRY[kind.name] = kind
    return kind


register(base_image.KIND)       # --base-image: an image that already has PyTorch
register(debootstrap_cpu.KIND)  # --gpu cpu
register(cuda_pip.KIND)         # --toolkit pip
register(cuda_debian.KIND)      # --toolkit debian: Debian's nvidia-cuda-toolkit
register(cuda_image.KIND)       # --toolkit image (the default): an nvidia/cuda devel image


def names() -> list[str]:
    return list(REGISTRY)


def get(name: str) -> Kind:
    """The kind of that name (a Spec's `kind`)."""
    try:
        return REGISTRY[name]
    except KeyError:
        raise UsageError(f"unknown image kind `{name}`{did_you_mean(name, REGISTRY)}; known kinds: "
                             f"{', '.join(REGISTRY)}.") from None


def for_request(req: Request) -> Kind:
    """The first kind in the registry that claims req, or ResolveError."""
    toolkits = sorted((k.toolkit, k.toolkit_help) for k in REGISTRY.values() if k.toolkit)
    if req.toolkit and req.toolkit not in {t for t, _ in toolkits}:
        # Checked before any kind claims the request: a typo must never be ignored by a kind without toolkits.
        choices = " or ".join(f"{t} ({h})" for t, h in toolkits)
        raise ResolveError(f"unknown toolkit `{req.toolkit}`{did_you_mean(req.toolkit, [t for t, _ in toolkits])}; "
                           f"use {choices}.")
    for kind in REGISTRY.values():
        if kind.claims(req):
            return kind
    raise ResolveError(f"no kind of image fits this request (kinds: {', '.join(REGISTRY)}); "
                       f"name a GPU, a --toolkit, or a --base-image.")


def probes(base: str | None) -> bool:
    """Whether resolving with this base needs facts found by running the image (see builder.probe_base)."""
    return any(kind.probes(base) for kind in REGISTRY.values())


__all__ = ["REGISTRY", "BaseStatus", "Kind", "Request", "for_request", "get", "names", "probes", "register"]
