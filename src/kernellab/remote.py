"""Another machine's Docker engine as a place: `--host ssh://[user@]host[:port]` on any run task.

Many labs run a workstation plus a few GPU servers reached by ssh, with Docker on each and no scheduler. SshHost is
such a server as kernellab.container.runner's Host: the engine is the server's (the docker CLI and SDK reach it
through ssh, as Docker's own `DOCKER_HOST=ssh://...` does), and what a local container takes from this machine
comes from the server instead:

- /workspace: a copy of the repository under ~/.cache/kernellab/remote/<checkout>/workspace there, made with
  rsync as the cluster snapshot lists files (tracked and untracked, not ignored; never results/ or .git): a second
  run sends only what changed, and files deleted here are deleted there;
- the image: found there by ID, else sent with kernellab's own export (a delta against the last image sent there
  when that one is still there), loaded and checked layer by layer as `invoke import-image` does;
- GPUs: the server's nvidia-smi, and the best mode it offers (the NVIDIA runtime, CDI, or its device nodes and
  driver files);
- folders a job mounts (a recipe's scratch and inputs): sent there before, brought back after, as is results/.

Ctrl-C removes the container on the server (runner.run does, through the same engine). ssh must log in without a
password (a key or an agent); everything goes through the system's `ssh`, so ~/.ssh/config applies.
"""
from __future__ import annotations

import hashlib
import json
import os
import shlex
import shutil
import socket
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence
from urllib.parse import urlsplit

from . import ROOT, gpu, proc
from .container import runner
from .engine import Docker, Engine, Image, current
from .errors import KernellabError, UsageError

#: Where a checkout's copy, its cache and the folders sent for jobs live on the server (under its user's home).
BASE = ".cache/kernellab/remote"
SSH_OPTIONS = ("-o", "BatchMode=yes", "-o", "ConnectTimeout=20")


class RemoteError(KernellabError):
    """The server cannot be reached, lacks a tool, or a copy to or from it failed."""


@dataclass(frozen=True)
class Address:
    """ssh://[user@]host[:port], as Docker writes it."""

    url: str
    user: str | None
    host: str
    port: int | None

    @classmethod
    def parse(cls, url: str) -> Address:
        parts = urlsplit(url)
        if parts.scheme != "ssh" or not parts.hostname or parts.path not in ("", "/") or parts.query:
            raise UsageError(f"--host {url}: give ssh://[user@]host[:port] (as Docker's DOCKER_HOST takes it).")
        try:
            port = parts.port
        except ValueError:
            raise UsageError(f"--host {url}: the port is not a number.") from None
        return cls(url, parts.username, parts.hostname, port)

    @property
    def login(self) -> str:
        return f"{self.user}@{self.host}" if self.user else self.host

    def ssh(self) -> list[str]:
        return ["ssh", *SSH_OPTIONS, *(["-p", str(self.port)] if self.port else [])]


@dataclass(eq=False)   # one per URL (at()); its cached answers are per object
class SshHost:
    """A server's Docker engine reached by ssh (see the module's docstring)."""

    address: Address
    engine: Engine = field(init=False)
    _home: str | None = None
    _user: tuple[int, int] | None = None
    _hostname: str | None = None
    _gpus: list[gpu.HostGpu] | None = None
    _driver: tuple[list[str], dict[str, str]] | None = None
    _synced: bool = False
    _sent: dict[Path, str] = field(default_factory=dict)    # folders of this machine -> their copies there

    def __post_init__(self) -> None:
        self.engine = Docker(host=self.address.url)

    # ------------------------------------------------------------ ssh
    def run(self, command: str, *, check: bool = True, timeout: float = 120) -> proc.Result:
        """One shell command line on the server; RemoteError (one sentence) when it cannot be reached."""
        if shutil.which("ssh") is None:
            raise RemoteError("--host needs an ssh client here (`apt-get install openssh-client`).")
        r = proc.run([*self.address.ssh(), self.address.login, "--", command], check=False, timeout=timeout)
        if r.returncode == 255:
            raise RemoteError(f"cannot reach {self.address.url} with ssh ({_last_line(r.stderr)}): it must log in "
                              f"without a password (a key, an agent); try `{shlex.join(self.address.ssh())} "
                              f"{self.address.login} true`.")
        if check and not r.ok:
            raise RemoteError(f"on {self.address.host}, `{command.splitlines()[0][:80]}` failed "
                              f"({_last_line(r.stderr or r.stdout)}).")
        return r

    def home(self) -> str:
        if self._home is None:
            self._home = self.run('printf %s "$HOME"').stdout.strip()
        return self._home

    def base(self) -> str:
        """This checkout's folder on the server (two checkouts, or two machines sending, never share one)."""
        key = hashlib.sha256(f"{socket.gethostname()}:{ROOT.resolve()}".encode()).hexdigest()[:12]
        return f"{self.home()}/{BASE}/{ROOT.name}-{key}"

    # ------------------------------------------------------------ runner.Host
    # Each fact is asked once per process (one host object per URL: at()).
    def user(self) -> tuple[int, int]:
        if self._user is None:
            uid, gid = self.run("id -u; id -g").stdout.split()
            self._user = int(uid), int(gid)
        return self._user

    def hostname(self) -> str:
        if self._hostname is None:
            self._hostname = self.run("hostname").stdout.strip() or self.address.host
        return self._hostname

    def workspace(self) -> str:
        """The repository's copy on the server, brought up to date once per process (only what changed)."""
        dest = f"{self.base()}/workspace"
        if not self._synced:
            self.run(f"mkdir -p {shlex.quote(dest)}/results")
            with tempfile.NamedTemporaryFile("w", prefix="kl-files-", suffix=".txt") as rules:
                rules.write(_mirror_rules())
                rules.flush()
                # The listed files and their folders, nothing else: what is there but not listed (a file deleted
                # or ignored here since) is deleted there, except results/, which runs there write.
                self._rsync(["--delete", "--delete-excluded", "--filter", "P /results/", "--include-from",
                             rules.name, "--exclude", "*", f"{ROOT}/", self._there(dest)])
            self._synced = True
        return dest

    def cache(self, uid: int, gid: int) -> str:
        path = f"{self.base()}/cache"
        self.run("mkdir -p " + " ".join(shlex.quote(f"{path}/{sub}") for sub in ("", *runner.CACHE_SUBDIRS)))
        return path

    def gpus(self) -> list[gpu.HostGpu]:
        if self._gpus is None:
            r = self.run(f"nvidia-smi {gpu.QUERY}", check=False, timeout=60)
            self._gpus = gpu.parse_gpus(r.stdout) if r.ok else []
        return self._gpus

    def best_gpu_mode(self, engine: Engine) -> str | None:
        """As doctor finds it here, asked there: the NVIDIA runtime, CDI specs, else its device nodes and driver."""
        if not self.gpus():
            return None
        info = self.engine.info()
        if "nvidia" in info.runtimes:
            return "nvidia"
        dirs = " ".join(shlex.quote(d) for d in info.cdi_dirs)
        if dirs and self.run(f"ls {dirs} 2>/dev/null | grep -q nvidia", check=False).ok:
            return "cdi"
        nodes, files = self.driver()
        has_cuda = str(gpu.DRIVER_DIR) in files or any("libcuda.so" in inside for inside in files.values())
        return "devices" if nodes and has_cuda else None

    def driver(self) -> tuple[list[str], dict[str, str]]:
        """The server's /dev/nvidia* nodes and driver files (its /usr/local/nvidia, else what its ldconfig lists)."""
        if self._driver is None:
            lib = str(gpu.DRIVER_DIR)
            r = self.run(f"ls -d /dev/nvidia[0-9]* {' '.join(gpu.CONTROL_NODES)} 2>/dev/null; echo ---; "
                         f"ls {lib}/lib64/libcuda.so* >/dev/null 2>&1 && echo HAS_DRIVER_DIR || "
                         "{ ldconfig -p 2>/dev/null || /sbin/ldconfig -p; }; echo ---; command -v nvidia-smi",
                         check=False)
            listed, _, rest = r.stdout.partition("---\n")
            libs, _, smi = rest.partition("---\n")
            number = len("/dev/nvidia")
            found = listed.split()
            nodes = sorted((n for n in found if n[number:].isdigit()), key=lambda n: int(n[number:]))
            nodes += [n for n in found if not n[number:].isdigit()]   # the control nodes, as gpu.device_nodes
            files = {lib: lib} if libs.strip() == "HAS_DRIVER_DIR" else gpu.driver_libraries(libs)
            if smi.strip() and files and lib not in files:
                files[smi.strip()] = f"{lib}/bin/nvidia-smi"
            self._driver = nodes, files
        return self._driver

    def selected_gpus(self, gpu_index: str | int | None) -> list[str] | None:
        if gpu_index is None:
            return None  # this shell's CUDA_VISIBLE_DEVICES or Slurm's GPUs say nothing of the server's
        return gpu.selected_gpus(gpu_index, environ={}, gpus=self.gpus())

    def image(self, image: str | Image) -> str | Image:
        """This machine's image on the server: found there by ID, else sent (see send())."""
        self.engine.require()   # an engine that does not answer is not one without the image
        local = current().image(image)
        there = self.engine.find_image(local.id)
        if there is None:
            self.send(local)
            there = self.engine.image(local.id)
        return Image(local.ref, there.id, there.labels, there.env)

    def folder(self, path: Path) -> str:
        """A folder of this machine as the server has it: its copy there, sent now and brought back after the run."""
        path = path.resolve()
        if path not in self._sent:
            key = hashlib.sha256(str(path).encode()).hexdigest()[:12]
            there = f"{self.base()}/folders/{key}-{path.name}"
            path.mkdir(parents=True, exist_ok=True)
            self.run(f"mkdir -p {shlex.quote(there)}")
            self._rsync(["--delete", f"{path}/", self._there(there)])
            self._sent[path] = there
        return self._sent[path]

    def mount(self, spec: str) -> str:
        here, _, rest = spec.partition(":")
        return f"{self.folder(Path(here))}:{rest}"

    def tool_mounts(self, names: Sequence[str]) -> list[str]:
        return []  # the image's own Nsight tools: this machine's installs are no use there

    def bring_back(self) -> None:
        """What the job wrote: the folders sent for it, and new files under the copy's results/ (never deleting)."""
        for path, there in self._sent.items():
            self._rsync([f"{self._there(there)}/", f"{path}/"])
        if self._synced:
            (ROOT / "results").mkdir(exist_ok=True)
            self._rsync([f"{self._there(self.base())}/workspace/results/", f"{ROOT}/results/"])

    # ------------------------------------------------------------ the image
    def send(self, local: Image) -> None:
        """The image as kernellab's export (a delta against the last image sent there, if the server still has
        it), imported into the server's engine through ssh and checked as `invoke import-image` checks."""
        from .transfer import export as exports
        from .transfer import importers

        print(f"sending image {local.ref} ({local.id[:19]}) to {self.address.host}: it has no image of that ID")
        state = _sent_state(self.address)
        last = state / "last-manifest.json"
        since = last if last.is_file() and self.engine.find_image(json.loads(last.read_text())
                                                                  .get("image", {}).get("id", "")) else None
        with tempfile.TemporaryDirectory(prefix="kl-send-") as tmp:
            bundle = exports.export_image(local.id, tmp, since=since, engine=current())
            importers.import_bundle(bundle, to=None, engine=self.engine)
            shutil.copyfile(bundle / "manifest.json", last)

    # ------------------------------------------------------------ copies
    def _there(self, path: str) -> str:
        return f"{self.address.login}:{path}"

    def _rsync(self, args: list[str]) -> None:
        if shutil.which("rsync") is None:
            raise RemoteError("--host copies the repository with rsync: install it here and on the server "
                              "(`apt-get install rsync`).")
        r = proc.run(["rsync", "-a", "-e", shlex.join(self.address.ssh()), *args], check=False, timeout=3600)
        if not r.ok:
            raise RemoteError(f"copying to or from {self.address.host} failed: rsync said "
                              f"{_last_line(r.stderr)} (the server needs rsync too).")


def _mirror_rules() -> str:
    """rsync include rules for the repository's files as the cluster snapshot lists them (never results/, .git/),
    each with its folders; rsync's wildcard characters in a name are escaped."""
    from .cluster.plan import repository_files

    files = [f for f in repository_files(ROOT) if not f.startswith(("results/", ".git/")) and (ROOT / f).is_file()]
    folders = {str(parent) for f in files for parent in Path(f).parents if str(parent) != "."}
    escape = str.maketrans({c: "\\" + c for c in "*?[\\"})
    return "".join(f"/{name.translate(escape)}{'/' if name in folders else ''}\n" for name in sorted({*folders, *files}))


def _sent_state(address: Address) -> Path:
    from . import cache_root

    key = hashlib.sha256(address.url.encode()).hexdigest()[:12]
    path = cache_root() / "remote" / key
    path.mkdir(parents=True, exist_ok=True)
    return path


def _last_line(text: str) -> str:
    lines = [line.strip() for line in (text or "").splitlines() if line.strip()]
    return lines[-1][:200] if lines else "no message"


_hosts: dict[str, SshHost] = {}


def at(url: str) -> SshHost:
    """The host --host names: one object per URL in a process (its checkout is copied once)."""
    address = Address.parse(url)
    if address.url not in _hosts:
        if os.environ.get("KERNELLAB_ENGINE", "docker") != "docker":
            raise UsageError("--host reaches another machine's Docker engine; it does not take Podman.")
        _hosts[address.url] = SshHost(address)
    return _hosts[address.url]
