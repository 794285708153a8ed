"""What a result was made with, as typed values with one owner each: the checkout of kernellab that ran
(Checkout), the machine it ran on (Machine: host, GPU, driver, clocks) and a recipe's image (ImageFacts).

A bench result (kernellab.bench.environment) and a recipe record (kernellab.recipes.record) both take them from
here. Each is collected where its facts live: the machine where the work runs (this process, or the cluster node's
task), the checkout and the image by whoever planned the work (the submitting side knows the commit and the image
ID it converted; a node has neither a .git nor, off Docker, KERNELLAB_IMAGE_ID). Standard library and kernellab's
own source only: a node's and an image's Python import it.

The JSON edge keeps the names records have always had; keys an older kernellab wrote that these types do not know
are kept as written (`extra`), so reading a record and writing it back loses nothing.
"""
from __future__ import annotations

import os
import socket
import tempfile
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Mapping, TypedDict

from . import ROOT, proc
from .errors import KernellabError
from .gpu import HostGpu, host_gpus, nvidia_smi, selected_gpus

#: nvidia-smi's names for the clock and power facts a record keeps of its GPU.
CLOCKS = ("clocks.sm", "clocks.mem", "clocks.max.sm", "clocks.max.mem", "power.limit", "persistence_mode")


def now() -> str:
    """A record's date: local time with its UTC offset."""
    return time.strftime("%Y-%m-%dT%H:%M:%S%z")


@dataclass(frozen=True)
class Checkout:
    """The kernellab checkout that ran: its commit, whether it had uncommitted changes, and then the git tree of
    the checkout as it was (every file a commit would take, new ones too), which names exactly what ran."""

    commit: str | None
    dirty: bool | None
    tree: str | None = None

    @classmethod
    def here(cls, root: Path = ROOT, *, tree: bool = True) -> Checkout:
        """This checkout, from git; from the .git files alone (commit only) where git is not installed."""
        if not proc.which("git"):
            return cls(commit_from_files(root / ".git"), None)
        head = proc.run([*_git(root), "rev-parse", "HEAD"], check=False, timeout=30)
        if not head.ok:
            return cls(commit_from_files(root / ".git"), None)
        status = proc.run([*_git(root), "status", "--porcelain", "--untracked-files=no"], check=False, timeout=60)
        dirty = bool(status.stdout.strip()) if status.ok else None
        return cls(head.stdout.strip(), dirty, working_tree(root) if dirty and tree else None)

    def to_dict(self) -> dict[str, str | bool | None]:
        return {"commit": self.commit, "dirty": self.dirty, "tree": self.tree}

    @classmethod
    def from_dict(cls, data: Mapping[str, object]) -> Checkout:
        return cls(_str(data.get("commit")), _bool(data.get("dirty")), _str(data.get("tree")))


def _git(root: Path) -> list[str]:
    # Inside a container the repository is often another UID's; safe.directory lets git read it.
    return ["git", "-c", "safe.directory=*", "-C", str(root)]


def working_tree(root: Path = ROOT) -> str | None:
    """The git tree of the checkout as it is, written through a throwaway index (the real one is left alone):
    committing that state gives a commit with this tree."""
    with tempfile.TemporaryDirectory(prefix="kl-tree-") as tmp:
        env = {"GIT_INDEX_FILE": str(Path(tmp) / "index")}
        added = proc.run([*_git(root), "add", "-A", "."], env=env, check=False, timeout=120)
        tree = proc.run([*_git(root), "write-tree"], env=env, check=False, timeout=60) if added.ok else None
    return tree.stdout.strip() if tree and tree.ok else None


def commit_from_files(git: Path) -> str | None:
    """HEAD's commit read from .git itself (a loose or packed ref); None outside a checkout or before a commit."""
    try:
        head = (git / "HEAD").read_text().strip()
        if not head.startswith("ref: "):
            return head
        ref = head[5:]
        if (git / ref).exists():
            return (git / ref).read_text().strip()
        for line in (git / "packed-refs").read_text().splitlines():
            if line.endswith(" " + ref):
                return line.split()[0]
    except OSError:
        pass
    return None


class GpuFacts(TypedDict, total=False):
    """A GPU as nvidia-smi names it (gpu.HostGpu's fields); a record from before the node collected its own
    facts knows only the name."""

    index: int
    name: str
    uuid: str
    compute_capability: str
    driver: str
    memory_mib: int


@dataclass(frozen=True)
class Machine:
    """Where the work ran: the host, the GPU it used (None: a CPU run), its driver and clocks at the start, and on a
    cluster the GPU type (the profile's name) the task ran on."""

    host: str | None
    gpu: GpuFacts | None = None
    driver: str | None = None
    clocks: dict[str, str] = field(default_factory=dict)
    gpu_type: str | None = None
    extra: dict[str, object] = field(default_factory=dict)   # keys an older kernellab wrote, kept as written

    @classmethod
    def here(cls, chosen: HostGpu | None, *, gpu_type: str | None = None) -> Machine:
        """This host and the GPU the work uses, its clocks read by nvidia-smi now."""
        clocks: dict[str, str] = {}
        smi = nvidia_smi()
        if chosen and smi:
            r = proc.run([smi, f"--query-gpu={','.join(CLOCKS)}", "--format=csv,noheader", "-i", str(chosen.index)],
                         check=False, timeout=60)
            if r.ok:
                clocks = dict(zip(CLOCKS, (v.strip() for v in r.stdout.strip().split(","))))
        return replace(cls.of(socket.gethostname(), chosen, gpu_type=gpu_type), clocks=clocks)

    @classmethod
    def of(cls, host: str, chosen: HostGpu | None, *, gpu_type: str | None = None) -> Machine:
        """The host named host and the GPU the work uses there, as its nvidia-smi listed it; no clocks (another
        machine's, a server reached by ssh: this machine's nvidia-smi cannot read them)."""
        facts = GpuFacts(index=chosen.index, name=chosen.name, uuid=chosen.uuid, driver=chosen.driver,
                         compute_capability=chosen.compute_capability, memory_mib=chosen.memory_mib) if chosen else None
        return cls(host, facts, chosen.driver if chosen else None, {}, gpu_type)

    @classmethod
    def of_task(cls, environ: Mapping[str, str] = os.environ, *, gpu_type: str | None = None) -> Machine:
        """A cluster task's machine, collected on its node: the first GPU it was given (Slurm's selection or
        CUDA_VISIBLE_DEVICES, else the first the node has)."""
        gpus = host_gpus()
        try:
            chosen = selected_gpus(environ=environ, gpus=gpus)
        except KernellabError:  # a selection this node cannot map (UUIDs it hides): the first GPU it shows
            chosen = None
        given = [g for g in gpus if chosen is None or str(g.index) in chosen]
        return cls.here(given[0] if given else None, gpu_type=gpu_type)

    @property
    def gpu_name(self) -> str | None:
        return self.gpu.get("name") if self.gpu else None

    def to_dict(self) -> dict[str, object]:
        return {"gpu": dict(self.gpu) if self.gpu is not None else None, "driver": self.driver,
                "clocks": dict(self.clocks), "host": self.host,
                **({"gpu_type": self.gpu_type} if self.gpu_type else {}), **self.extra}

    @classmethod
    def from_dict(cls, data: Mapping[str, object]) -> Machine:
        gpu_facts, clocks = data.get("gpu"), data.get("clocks")
        return cls(_str(data.get("host")), GpuFacts(**gpu_facts) if isinstance(gpu_facts, dict) else None,
                   _str(data.get("driver")), dict(clocks) if isinstance(clocks, dict) else {},
                   _str(data.get("gpu_type")), {k: v for k, v in data.items() if k not in _MACHINE_KEYS})


_MACHINE_KEYS = ("host", "gpu", "driver", "clocks", "gpu_type")


@dataclass(frozen=True)
class ImageFacts:
    """A recipe's image: its ID and tag, the target and base image it was built on (with the base's lock hash), the
    recipe's hash and the hash of the manifest kept in the image. Only id, target and recipe_sha256 are known of
    every image; the rest is None where it is not known (an image made otherwise, a salvaged record)."""

    id: str
    target: str | None
    recipe_sha256: str | None
    base_id: str | None = None
    tag: str | None = None
    base_lock_sha256: str | None = None
    recipe_manifest_sha256: str | None = None
    extra: dict[str, object] = field(default_factory=dict)   # keys an older kernellab wrote, kept as written

    def known(self, facts: Mapping[str, str | None]) -> ImageFacts:
        """These facts with those only the machine that has the image knows (tag, base_lock_sha256,
        recipe_manifest_sha256: recipes.reproduce.image_facts) added."""
        return replace(self, **{k: v for k, v in facts.items() if k in _IMAGE_KEYS})  # type: ignore[arg-type]

    def to_dict(self) -> dict[str, object]:
        always = {"id": self.id, "target": self.target, "recipe_sha256": self.recipe_sha256}
        known = {k: getattr(self, k) for k in _IMAGE_KEYS[3:] if getattr(self, k) is not None}
        return {**always, **known, **self.extra}

    @classmethod
    def from_dict(cls, data: Mapping[str, object]) -> ImageFacts:
        get = {k: _str(data.get(k)) for k in _IMAGE_KEYS}
        return cls(get["id"] or "", get["target"], get["recipe_sha256"], get["base_id"], get["tag"],
                   get["base_lock_sha256"], get["recipe_manifest_sha256"],
                   {k: v for k, v in data.items() if k not in _IMAGE_KEYS})


_IMAGE_KEYS = ("id", "target", "recipe_sha256", "base_id", "tag", "base_lock_sha256", "recipe_manifest_sha256")


def _str(value: object) -> str | None:
    return None if value is None else str(value)


def _bool(value: object) -> bool | None:
    return None if value is None else bool(value)
