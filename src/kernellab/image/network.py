"""Networks for builds: the host's pip configuration, proxies and extra CA certificates.

- pip: the host's configuration (index-url, extra-index-url, find-links, trusted-host) is honoured
  inside builds by default. Local folders and file:// indexes are served to the build over a
  short-lived HTTP server on 127.0.0.1 (builds use the host network), so nothing is copied into
  the build context and nothing lands in a layer. The rewritten pip.conf reaches the build as a
  BuildKit secret: index credentials never end up in the image.
- proxies: HTTP(S)_PROXY/NO_PROXY pass as Docker's predefined proxy build args, which are not
  recorded in the image's history or config.
- CA certificates: --ca-cert files plus the host's /usr/local/share/ca-certificates/**/*.crt are
  installed in the image's trust store before anything is downloaded.
"""
from __future__ import annotations

import ast
import contextlib
import http.server
import os
import sys
import tempfile
import threading
import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

from .. import proc
from ..errors import UsageError

PROXY_VARS = ("HTTP_PROXY", "HTTPS_PROXY", "FTP_PROXY", "NO_PROXY", "ALL_PROXY")
HOST_CA_DIR = Path("/usr/local/share/ca-certificates")
PIP_KEYS = ("index-url", "extra-index-url", "find-links", "trusted-host", "timeout", "retries")


@dataclass
class PipConfig:
    """The pip options that matter for a build, as the host has them."""

    values: dict[str, list[str]] = field(default_factory=dict)

    def local_paths(self) -> list[Path]:
        out = []
        for key in ("index-url", "extra-index-url", "find-links"):
            for v in self.values.get(key, []):
                p = _local_path(v)
                if p is not None:
                    out.append(p)
        return out


def _local_path(value: str) -> Path | None:
    if value.startswith("file://"):
        return Path(urllib.parse.unquote(urllib.parse.urlparse(value).path))
    if "://" not in value and value.startswith("/"):
        return Path(value)
    return None


def host_pip_config() -> PipConfig:
    """Read the host's effective pip configuration (files and PIP_* variables)."""
    r = proc.run([sys.executable, "-m", "pip", "config", "list"], check=False, timeout=60)
    lines = r.stdout.splitlines() if r.ok else []
    values: dict[str, list[str]] = {}
    for line in lines:
        if "=" not in line:
            continue
        key, _, raw = line.partition("=")
        section, _, name = key.rpartition(".")
        if name not in PIP_KEYS or section not in ("global", "install", ":env:"):
            continue
        raw = raw.strip()
        try:  # pip prints each value as a Python literal: multi-line values carry "\n" escapes
            raw = str(ast.literal_eval(raw))
        except (ValueError, SyntaxError):
            raw = raw.strip("'\"")
        items = raw.split() if name in ("extra-index-url", "find-links", "trusted-host") else [raw]
        bucket = values.setdefault(name, [])
        bucket.extend(i for i in items if i not in bucket)
    return PipConfig(values)


class _Handler(http.server.SimpleHTTPRequestHandler):
    roots: dict[str, Path] = {}

    def translate_path(self, path: str) -> str:
        parts = urllib.parse.urlparse(path).path.lstrip("/").split("/", 1)
        root = self.roots.get(parts[0])
        if root is None:
            return "/nonexistent"
        rest = urllib.parse.unquote(parts[1] if len(parts) > 1 else "")
        target = (root / rest).resolve()
        if root.resolve() not in (target, *target.parents):
            return "/nonexistent"
        return str(target)

    def log_message(self, format: str, *args: object) -> None:  # quiet: the build log is enough
        pass


@contextlib.contextmanager
def build_pip_conf(config: PipConfig | None = None, wheelhouse: Path | None = None, *,
                   dated: bool = False) -> Iterator[Path]:
    """Yield a pip.conf for the build; serve any local folders it names while the block runs.

    With wheelhouse, pip installs offline from that folder only (--no-index). dated (a target with as_of): local
    indexes and find-links are left out, since pip's --uploaded-prior-to needs an index that gives upload times
    (PyPI, or a mirror that passes them on) and refuses any that does not.
    """
    config = config if config is not None else host_pip_config()
    roots: dict[str, Path] = {}

    def serve(path: Path, index: bool) -> str:
        name = f"r{len(roots)}"
        if index:
            # A simple index links files relative to itself (../../files/x.whl): serve its parent.
            roots[name] = path.parent
            return f"{name}/{path.name}/"
        roots[name] = path
        return f"{name}/"

    lines = ["[global]"]
    served: list[tuple[str, str]] = []  # (key, relative url)
    if wheelhouse is not None:
        if not wheelhouse.is_dir():
            raise UsageError(f"wheelhouse {wheelhouse} is not a folder; pass a folder of wheels to --wheelhouse.")
        lines.append("no-index = true")
        served.append(("find-links", serve(wheelhouse.resolve(), index=False)))
    else:
        for key in ("index-url", "extra-index-url", "find-links"):
            for v in config.values.get(key, []):
                local = _local_path(v)
                if local is not None and dated:
                    continue
                if local is None:
                    served.append((key, v))
                elif local.exists():
                    served.append((key, serve(local, index=key != "find-links")))
        for key in ("timeout", "retries"):
            if key in config.values:
                lines.append(f"{key} = {' '.join(config.values[key])}")
    with tempfile.TemporaryDirectory(prefix="kl-pip-") as tmp:
        server = None
        base = ""
        if roots:
            handler = type("Handler", (_Handler,), {"roots": roots})
            server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
            base = f"http://127.0.0.1:{server.server_address[1]}/"
            threading.Thread(target=server.serve_forever, daemon=True).start()
        grouped: dict[str, list[str]] = {}
        for key, url in served:
            grouped.setdefault(key, []).append(url if "://" in url else base + url)
        for key, urls in grouped.items():
            if key == "index-url":
                lines.append(f"index-url = {urls[0]}")
                urls = urls[1:]
                key = "extra-index-url"
            if urls:
                lines.append(f"{key} = " + "\n    ".join(urls))
        trusted = [] if wheelhouse is not None else list(config.values.get("trusted-host", []))
        if roots and "127.0.0.1" not in trusted:
            trusted.append("127.0.0.1")
        if trusted:  # one line: pip rejects a repeated option
            lines.append("trusted-host = " + " ".join(trusted))
        conf = Path(tmp) / "pip.conf"
        conf.write_text("\n".join(lines) + "\n")
        os.chmod(conf, 0o600)
        try:
            yield conf
        finally:
            if server is not None:
                server.shutdown()
                server.server_close()


def proxy_build_args(env: dict[str, str] | None = None) -> tuple[list[str], dict[str, str]]:
    """`--build-arg NAME` flags for the proxy variables that are set, and the env to run docker with.

    Values are passed through the environment, never on the command line (ps would show them).
    127.0.0.1 is added to NO_PROXY so the build reaches the local pip server directly.
    """
    env = dict(os.environ if env is None else env)
    args: list[str] = []
    out_env: dict[str, str] = {}
    present = [v for v in PROXY_VARS for v in (v, v.lower()) if env.get(v)]
    if not present:
        return [], {}
    for lower in ("no_proxy", "NO_PROXY"):
        current = env.get(lower, "")
        entries = [e for e in current.split(",") if e]
        for extra in ("127.0.0.1", "localhost"):
            if extra not in entries:
                entries.append(extra)
        out_env[lower] = ",".join(entries)
    for name in dict.fromkeys(present + ["no_proxy", "NO_PROXY"]):
        args += ["--build-arg", name]
        out_env.setdefault(name, env.get(name, ""))
    return args, out_env


def ca_certificates(extra: list[str] | tuple[str, ...] = (), host: bool = True) -> tuple[Path, ...]:
    """The CA certificates to trust inside images: --ca-cert files, then the host's extra ones."""
    certs: list[Path] = []
    for c in extra:
        p = Path(c).expanduser()
        if not p.is_file():
            raise UsageError(f"CA certificate {c} does not exist; pass the PEM file of your proxy's CA to --ca-cert.")
        if b"BEGIN CERTIFICATE" not in p.read_bytes():
            raise UsageError(f"{c} is not a PEM certificate (no BEGIN CERTIFICATE line); export it as PEM.")
        certs.append(p)
    if host and HOST_CA_DIR.is_dir():
        certs += sorted(p for p in HOST_CA_DIR.rglob("*.crt") if p.is_file())
    return tuple(dict.fromkeys(certs))


