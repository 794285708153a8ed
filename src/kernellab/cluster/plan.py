"""What a cluster run does: its tasks (one per op, or per --tasks, for each GPU type), saved as data.

A plan is written once, to `<shared>/runs/<run>/plan.json`, beside a snapshot of the repository
(`workspace/`) that every task mounts at /workspace: the tasks run the code as it was at submission,
whatever the user edits meanwhile. The node-side runner (kernellab.cluster.node) reads the same file.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Sequence

from .. import ROOT
from ..errors import ClusterError
from ..jobs import RESULTS
from ..provenance import Checkout

#: Variables a task must not inherit from the submitting shell (they name this machine's folders).
_LOCAL_ONLY = ("KERNELLAB_CACHE", "KERNELLAB_IMAGE_ID", "KERNELLAB_ENGINE", "KERNELLAB_CLUSTER")
#: The mergers of plans written before a plan named its own (they named the job's kind only).
_OLD_MERGERS = {"test": "kernellab.cluster.report:test_table", "bench": "kernellab.cluster.report:bench_tables"}


@dataclass
class Task:
    """One array task: a command in the image, on one GPU of one type."""

    gpu: str
    index: int                  # its index in the GPU type's array
    name: str                   # the job's part: the op, the experiment, task-<i>
    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)

    @property
    def key(self) -> str:
        return f"{self.gpu}/{self.name}"


@dataclass
class Plan:
    run: str
    job: str                                   # what ran: test, bench, submit, recipe, ... (its title only)
    rundir: str                                # <shared>/runs/<run>
    runtime: str
    gpu_mode: str
    image: dict[str, Any]                      # ref, id, path (the nodes' format), arch_list
    tasks: list[Task]
    jobs: dict[str, list[str]] = field(default_factory=dict)  # GPU type -> Slurm job IDs, oldest first
    select: str | None = None
    argv: list[str] = field(default_factory=list)   # how it was asked for (kernellab's own command line)
    python: str = "python3"                          # the nodes' Python (runtime none runs tasks in it)
    merger: str | None = None                        # "module:function" that writes the run's own tables
    checkout: Checkout | None = None                 # the kernellab that planned it, which the snapshot copies

    @property
    def gpus(self) -> list[str]:
        return list(dict.fromkeys(t.gpu for t in self.tasks))

    def tasks_of(self, gpu: str) -> list[Task]:
        return [t for t in self.tasks if t.gpu == gpu]

    def task(self, gpu: str, index: int) -> Task:
        for t in self.tasks:
            if t.gpu == gpu and t.index == index:
                return t
        raise ClusterError(f"run {self.run} has no task {index} for GPU type {gpu}.")

    @property
    def workspace(self) -> Path:
        return Path(self.rundir) / "workspace"

    def results_of(self, task: Task) -> str:
        """The folder a task writes, relative to the workspace (results/<run>/<gpu>/<name>)."""
        return f"results/{self.run}/{task.gpu}/{task.name}"

    def status_file(self, task: Task) -> Path:
        return Path(self.rundir) / "status" / task.gpu / f"{task.index}.json"

    def log_glob(self, task: Task) -> str:
        return f"{task.gpu}-{task.index}-*.log"

    def save(self, path: Path | None = None) -> Path:
        path = path or Path(self.rundir) / "plan.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}")
        tmp.write_text(json.dumps(asdict(self), indent=1) + "\n")
        os.replace(tmp, path)
        return path

    @classmethod
    def load(cls, path: Path) -> Plan:
        try:
            data = json.loads(Path(path).read_text())
            if "kind" in data:  # a plan written before the job said how it fans out
                data["job"] = data.pop("kind")
                data["merger"] = data.get("merger") or _OLD_MERGERS.get(data["job"])
            data["tasks"] = [Task(**t) for t in data["tasks"]]
            data["checkout"] = Checkout.from_dict(data["checkout"]) if data.get("checkout") else None
            return cls(**data)
        except (OSError, ValueError, TypeError, KeyError) as e:
            raise ClusterError(f"{path} is not a kernellab cluster plan ({e}).") from None


def task_argv(argv: Sequence[str], run: str, gpu: str, name: str) -> tuple[list[str], dict[str, str]]:
    """A part's command line as its task runs it (jobs.RESULTS: the folder it writes, relative to the workspace),
    and the variables every task gets."""
    out = f"results/{run}/{gpu}/{name}"
    return [a.replace(RESULTS, out) for a in argv], {"KERNELLAB_RUN": run, "KERNELLAB_GPU_TYPE": gpu,
                                                      "KERNELLAB_RESULTS": out}


def passed_env() -> dict[str, str]:
    """kernellab's own switches from the submitting shell (KERNELLAB_REQUIRE_GPU, ...), for every task."""
    return {k: v for k, v in os.environ.items() if k.startswith("KERNELLAB_") and k not in _LOCAL_ONLY}


def snapshot(dest: Path, root: Path = ROOT) -> int:
    """Copy the repository's files (tracked and untracked, not ignored; never results/) to dest; return the count."""
    files = repository_files(root)
    dest.mkdir(parents=True, exist_ok=True)
    count = 0
    for rel in files:
        if rel.startswith(("results/", ".git/")) or rel == "results":
            continue
        src = root / rel
        if not src.is_file():
            continue
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, target)
        count += 1
    (dest / "results").mkdir(exist_ok=True)
    return count


def repository_files(root: Path = ROOT) -> list[str]:
    """The repository's files as git lists them (tracked and untracked, not ignored), else a walk that skips what
    kernellab makes."""
    if (root / ".git").exists() and shutil.which("git"):
        r = subprocess.run(["git", "-C", str(root), "ls-files", "-z", "-co", "--exclude-standard"],
                           capture_output=True, check=False)
        if r.returncode == 0:
            return [p for p in r.stdout.decode().split("\0") if p]
    skip = {".git", ".venv", ".cache", "results", "build", "__pycache__", "bundles", ".gpu-host", ".whl"}
    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d not in skip and not d.endswith(".egg-info")]
        out += [os.path.relpath(os.path.join(dirpath, f), root) for f in filenames]
    return out
