"""Whether the index a recipe's pip layer needs answers from this machine, said before pip spends a minute retrying:
the index pip asks first (`pip_index`), a probe through the environment's proxy (`unreachable`), and the one sentence
with the offline way (`offline_notice`, which also turns pip's retries off for that build). kernellab.recipes.build
calls it before a pip layer that is not cached yet."""
from __future__ import annotations

import http.client
import ssl
import urllib.error
import urllib.parse
import urllib.request
from typing import IO

from ..image import network
from .model import Recipe

#: pip's own index when the configuration names none.
PYPI = "https://pypi.org/simple"
#: How long the index may take to answer before a build says it is unreachable (pip retries for a minute or more).
PROBE_TIMEOUT_S = 5.0


def pip_index(config: network.PipConfig, *, dated: bool) -> str | None:
    """The index a recipe's pip layer asks first (its configured index-url, else PyPI); None for a local one, which
    the build serves from this machine (with dated, local indexes are left out: pip asks PyPI)."""
    for url in config.values.get("index-url", [])[:1]:
        if url.startswith("file://") or "://" not in url:
            return PYPI if dated else None
        return url
    return PYPI


def _bare(url: str) -> str:
    """url without the credentials it may carry (user:password@): what is probed and shown."""
    parts = urllib.parse.urlsplit(url)
    return parts._replace(netloc=parts.netloc.rpartition("@")[2]).geturl()


def unreachable(url: str, timeout: float = PROBE_TIMEOUT_S) -> str | None:
    """Why the index at url does not answer from this machine (through the proxy the environment names, as the
    build's pip goes), or None when it answers at all: any HTTP status, or a TLS failure that pip's own trust store
    may not share, counts as an answer."""
    try:
        with urllib.request.urlopen(urllib.request.Request(_bare(url), method="HEAD"), timeout=timeout):
            return None
    except urllib.error.HTTPError:
        return None
    except urllib.error.URLError as e:
        return None if isinstance(e.reason, ssl.SSLError) else str(e.reason)
    except OSError as e:  # a timeout while reading, a reset
        return str(e) or type(e).__name__
    except (ValueError, http.client.HTTPException):  # not a URL urllib takes, or an answer it cannot read
        return None


def offline_notice(recipe: Recipe, config: network.PipConfig, *, dated: bool, out: IO[str]) -> network.PipConfig:
    """Probe the index the recipe's pip layer needs; when it does not answer, say so in one sentence with the
    offline way, and return the configuration with pip's retries off (a cached pip layer needs no index at all)."""
    url = pip_index(config, dated=dated)
    why = unreachable(url) if url else None
    if url is None or why is None:
        return config
    # Where else pip looks (a local folder only where the build serves it: not for a dated resolution).
    others = [_bare(v) for key in ("extra-index-url", "find-links") for v in config.values.get(key, [])
              if not dated or ("://" in v and not v.startswith("file://"))]
    then = f", then looks in {', '.join(others)}" if others else ""
    out.write(f"pip's index {_bare(url)} does not answer from this machine ({why}), so the recipe's pip layer tries it "
              f"once instead of retrying for a minute{then}: to install offline, pass --wheelhouse DIR, a folder of "
              f"wheels holding {', '.join(recipe.pip_all)} and what they need (`pip download -d DIR` where there is "
              f"a network), or point PIP_INDEX_URL at an index this machine reaches.\n")
    return network.PipConfig({**config.values, "retries": ["0"]})
