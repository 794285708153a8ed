"""What `invoke recipe profile` runs inside the recipe's image (a job of its own, as a case is one):

    python -m kernellab.recipes.capture --cwd CWD --command CMD --stem STEM [--seconds S] [--cuda X.Y]
                                        [--nsys PATH] [--tool ncu --kernel REGEX ... [--clocks] [--ncu PATH]]
                                        [--about JSON]

With nsys (the default): find it (--nsys, else the image's own, else the host's mounted read-only), refuse before
capturing in one sentence (no nsys, its report importer does not start, it is older than the image's CUDA), capture
the case's bash command (kernellab.nsight.nsys.capture: a scrubbed environment, CPU sampling off, --seconds the
limit; CUDA and NVTX traced, or NVTX and OS runtime calls where the image has no CUDA) and export it to SQLite.
With --tool ncu: Nsight Compute on the kernels each --kernel names (no NVTX filter), exported as CSV; --clocks runs
each pattern a second time at the GPU's own clocks (only the time and the SM clock: `*-boost.csv`). Everything goes
to $KERNELLAB_OUT, with `inside.json`: what ran, or the problem, and --about (what the submitting side knows of the
case, handed back as it came: a cluster task's profile is written where its results are gathered). Standard library
and kernellab's nsight modules only. Its types are the documents' shapes: About (--about, profile.json's start),
Status (inside.json) and Profile (profile.json, which kernellab.recipes.profile.report writes).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict

from .. import proc
from ..errors import KernellabError, ProfileError
from ..nsight import ncu, nsys, tools

if TYPE_CHECKING:  # named only: the image's Python (3.8 and newer) need not have them, nor NotRequired
    from typing import NotRequired

    from .manifest import Applied, Verified
    from .model import Params
    from .values import Values

SECONDS = 600.0             # the capture's default time limit
LAUNCHES = 3                # Nsight Compute's launches of each --kernel pattern
STATUS, OUTPUT = "inside.json", "output.txt"
TOOLS = ("nsys", "ncu")
#: The one sentence for --clocks without --tool ncu (the task refuses it before building; this module too).
CLOCKS_NEED_NCU = "--clocks profiles Nsight Compute's kernels again at the GPU's own clocks; add --tool ncu."


class About(TypedDict):
    """profile.json's start (kernellab.recipes.profile.about): the case as the submitting side knows it before it
    runs, and the recipe's provenance as a run records it; what --about hands in and Status hands back."""

    format: str
    experiment: str
    case: Params
    command: str
    cwd: str
    target: str | None
    cuda: str | None
    with_gpu: bool
    kernels_expected: bool
    seconds_limit: float
    argv: list[str]
    tool: str
    recipe: str
    sources: dict[str, Verified]
    patches: list[Applied]
    values: Values
    paper: dict[str, object]
    image: dict[str, object]


class Status(TypedDict, total=False):
    """inside.json: what the job did (nsys's capture: version, path, trace, exit_code, report; ncu's runs: version,
    the csv files and, with --clocks, the second runs' beside them), or the problem; and --about, handed back as it
    came."""

    problem: str | None
    version: str | None
    path: str
    trace: list[str]
    exit_code: int | None
    report: str
    csv: list[str]
    boost_csv: list[str]
    about: About


class Counters(TypedDict):
    """Nsight Compute's counters of the kernels its patterns matched (ncu.summarize's rows; with `clocks`, each with
    its second run at the GPU's own clocks beside it: ncu.with_boost)."""

    version: str | None
    patterns: list[str]
    kernels: list[dict[str, Any]]
    clocks: NotRequired[bool]


class Nsys(TypedDict):
    """What profile.json says of the capture: Status's facts of it and the export's schema."""

    version: str | None
    path: str
    trace: list[str]
    exit_code: int | None
    report: str
    schema: str


class TopKernel(TypedDict):
    kernel: str
    launches: int
    total_ns: int
    share: float


class OsCall(TypedDict):
    call: str
    calls: int
    total_ns: int
    max_ns: int


class Profile(About):
    """profile.json (kernellab.recipes.profile.report): the start (About), where it ran, what nsys captured, ncu's
    counters (--tool ncu) and how long the case took (where nsys marked its start and finish)."""

    date: str
    machine: dict[str, object]   # run.json's form of it (record.machine_json)
    nsys: Nsys
    kernels: int
    ranges: int
    ncu: Counters | None
    top_kernels: list[TopKernel]
    case_seconds: NotRequired[float | None]


def preflight(exe: Path | None, cuda: str | None) -> str | None:
    """Why no capture can be made with this nsys for a program of this CUDA, in one sentence; None when it can."""
    if exe is None:
        return ("Nsight Systems (nsys) is neither in the recipe's image nor installed here: install it on this "
                "machine (`bash docker/nsight-systems.sh VERSION PREFIX`, docs/profile.md) or set KERNELLAB_NSYS.")
    found = nsys.version(exe)
    if found is None:
        return f"nsys at {exe} does not start (`{exe} --version` fails); reinstall Nsight Systems."
    return nsys.importer_works(exe) or nsys.too_old(found, cuda)



def program(cwd: str, command: str, folder: str) -> list[str]:
    """The case as the recipe runs it (bash -eo pipefail in /src/<cwd>), its output to folder/OUTPUT and its exit
    code to folder/exit-code (none there: stopped at the time limit)."""
    return ["bash", "-eo", "pipefail", "-c", f"trap 'echo $? > {folder}/exit-code' EXIT\nexec > {folder}/{OUTPUT} "
            f"2>&1\ncd /src/{cwd}\n{command}"]


def out_folder() -> Path:
    """$KERNELLAB_OUT, absolute (a cluster task's is relative to /workspace, and the case runs in /src/<cwd>)."""
    return Path(os.environ.get("KERNELLAB_OUT") or ".").resolve()


def inside(a: argparse.Namespace) -> Status:
    """What the job in the image does: checks, the capture (or ncu's runs) into $KERNELLAB_OUT; its status."""
    folder = out_folder()
    case = program(a.cwd, a.command, str(folder))
    if a.tool == "ncu":
        exe = Path(a.ncu) if a.ncu else tools.find("ncu")
        if exe is None:
            return {"problem": "Nsight Compute (ncu) is neither in the recipe's image nor installed here: install it "
                               "(docs/profile.md) or set KERNELLAB_NCU."}
        files: dict[bool, list[str]] = {False: [], True: []}
        for i, pattern in enumerate(a.kernel, 1):
            for boost in (False, True) if a.clocks else (False,):
                stem = f"ncu-{i}-boost" if boost else f"ncu-{i}"
                rep = folder / f"{stem}.ncu-rep"
                # at most LAUNCHES launches of each pattern (options before the program are ncu's)
                r = proc.run(ncu.ncu_argv(exe, rep, ["--launch-count", str(LAUNCHES), *case], kernel=pattern,
                                          nvtx=False, boost=boost), check=False)
                if r.returncode != 0 or not rep.exists():
                    return {"problem": ncu.explain_failure(r.stdout + r.stderr, r.returncode, exe)}
                csv = proc.run(ncu.import_argv(exe, rep), check=False)
                (folder / f"{stem}.csv").write_text(csv.stdout)
                files[boost].append(f"{stem}.csv")
        status: Status = {"version": ncu.ncu_version(exe), "csv": files[False]}
        if a.clocks:
            status["boost_csv"] = files[True]
        return status
    exe = Path(a.nsys) if a.nsys else tools.find("nsys")
    problem = preflight(exe, a.cuda)
    if problem or exe is None:
        return {"problem": problem}
    trace = list(nsys.TRACE if a.cuda else ("nvtx", "osrt"))
    try:
        rep = nsys.capture(exe, folder / f"{a.stem}.nsys-rep", case, trace=trace, seconds=a.seconds)
    except ProfileError as e:
        return {"problem": str(e)}
    code_file = folder / "exit-code"
    code = int(code_file.read_text()) if code_file.is_file() else None
    code_file.unlink(missing_ok=True)
    if code:
        output = (folder / OUTPUT).read_text(errors="replace").strip().splitlines() if (folder / OUTPUT).is_file() else []
        return {"problem": f"the case failed under nsys (exit code {code})" + (f": {output[-1]}" if output else "")
                + f"; its output: {OUTPUT}."}
    nsys.export(exe, rep)
    return {"version": nsys.version(exe), "path": str(exe), "trace": trace, "exit_code": code, "report": rep.name}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m kernellab.recipes.capture", description=__doc__.splitlines()[0])
    p.add_argument("--cwd", default=".")
    p.add_argument("--command", required=True)
    p.add_argument("--stem", default="profile")
    p.add_argument("--seconds", type=float, default=SECONDS)
    p.add_argument("--cuda", help="the image's CUDA (checked against the nsys's)")
    p.add_argument("--tool", choices=TOOLS, default="nsys")
    p.add_argument("--kernel", action="append", default=[])
    p.add_argument("--clocks", action="store_true", help="with --tool ncu: each pattern again at the GPU's own clocks")
    p.add_argument("--nsys")
    p.add_argument("--ncu")
    p.add_argument("--about", type=json.loads, help="JSON handed back in inside.json as `about`")
    a = p.parse_args(argv)
    if a.clocks and a.tool != "ncu":
        p.error(CLOCKS_NEED_NCU)
    try:
        status = inside(a)
    except KernellabError as e:
        status = Status(problem=str(e))
    if a.about is not None:
        status["about"] = a.about
    Path(out_folder(), STATUS).write_text(json.dumps(status, indent=1) + "\n")
    if status.get("problem"):
        print(f"kernellab: {status['problem']}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
