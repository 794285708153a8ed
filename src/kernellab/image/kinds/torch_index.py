"""The PyTorch index: the one place that decides where non-default torch builds come from.

`choose_index` decides the index (a URL template with "{variant}", or "" for none), `index_url` turns
it into one variant's URL, and `public_url` says whether that URL may be written into a Dockerfile.
Tasks, builds and tests all ask `choose_index`; resolve() itself stays pure and uses the matrix's.
"""
from __future__ import annotations

import os
import socket
import urllib.parse
from typing import Mapping

from ..spec import Spec
from ..targets import Matrix, Torch

ENV = "KERNELLAB_TORCH_INDEX"
#: With a proxy set, the index host is the proxy's to reach: it is not probed directly.
#: Set, they mean HTTPS goes through a proxy: a failed direct probe says nothing about the index.
HTTPS_PROXY_VARS = ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy")


def reachable(host: str) -> bool:
    """Whether host answers on port 443 within 3 s (the probe tests replace with a fake)."""
    try:
        socket.create_connection((host, 443), timeout=3).close()
        return True
    except OSError:
        return False


def choose_index(matrix: Matrix, *, probe: bool = False, environ: Mapping[str, str] | None = None) -> tuple[str, str]:
    """The PyTorch index template to use ("" = none) and a note when the matrix's was dropped.

    1. KERNELLAB_TORCH_INDEX when set, even empty (empty: the pip configuration alone provides
       PyTorch, e.g. a mirror or find-links).
    2. Else the matrix's [index] torch.
    3. With probe (a build, about to use it): the matrix's index is dropped, with a note, when its
       host does not answer, unless a proxy is set. pip retries an unreachable index for every
       package (~10 s each); behind a closed network the pip configuration has to provide PyTorch.
    Without probe (resolving, doctor, --dry-run) nothing waits on the network.
    """
    env = os.environ if environ is None else environ
    if ENV in env:
        return env[ENV], ""
    if not probe or not matrix.torch_index or any(env.get(v) for v in HTTPS_PROXY_VARS):
        return matrix.torch_index, ""
    host = urllib.parse.urlparse(matrix.torch_index.replace("{variant}", "cpu")).hostname or ""
    if reachable(host):
        return matrix.torch_index, ""
    return "", (f"{host} is unreachable: PyTorch must come from your pip configuration "
                f"(set {ENV} to a mirror to choose)")


def index_url(template: str, torch: Torch, variant: str) -> str | None:
    """The index one torch variant is installed from; None when PyPI has it (its default build) or no index."""
    if variant == torch.pypi_default or not template:
        return None
    return template.replace("{variant}", variant)


def public_url(spec: Spec, matrix: Matrix) -> str | None:
    """The index to write into the Dockerfile: only the matrix's public one.

    Any other index (a mirror set by KERNELLAB_TORCH_INDEX, maybe with credentials) reaches the
    build through the secret pip.conf instead (see builder.build), never through a layer.
    """
    if spec.torch_index and spec.torch_index == matrix.torch_index.replace("{variant}", spec.torch_variant):
        return spec.torch_index
    return None
