"""Nsight Systems (`nsys`): its command lines, its health, and what a capture recorded (read from its own export).

Owns the capture's command line (`capture_argv`: CUDA and NVTX traced, CPU sampling and context switches off unless
asked, an optional cudaProfilerStart/Stop capture range and a time limit), the environment a profiled program gets
(`clean_env`: only what a program needs, so that no credential of the caller's ends up in a report that a user
shares), running a capture and turning each way it fails into one sentence (`capture`), the SQLite export made
afresh every time (`export`: nsys would otherwise reuse an old `.sqlite`), and reading it back (`read`: kernels,
NVTX ranges, memory copies, the export's schema version checked). What the numbers mean (tables, gaps, the picture)
is kernellab.nsight.timeline; where nsys is installed is kernellab.nsight.tools.
"""
from __future__ import annotations

import os
import re
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from .. import proc
from ..errors import ProfileError
from ..image.targets import vkey
from . import tools
from .tools import Readiness

#: What a capture traces by default: CUDA (kernels, copies, the API calls that launched them) and NVTX ranges.
TRACE = ("cuda", "nvtx")
#: Export schema majors this reader knows (nsys 2020.4 to 2025.3 write 2.x and 3.x).
SCHEMA_MAJORS = ("2", "3")
#: Environment variables a profiled program keeps (plus every KERNELLAB_*); all else is dropped before nsys starts.
KEEP_ENV = ("PATH", "HOME", "USER", "LANG", "LC_ALL", "TERM", "TMPDIR", "LD_LIBRARY_PATH", "PYTHONPATH",
            "PYTHONUNBUFFERED", "VIRTUAL_ENV", "CUDA_HOME", "CUDA_PATH", "CUDA_VISIBLE_DEVICES", "CUDA_MODULE_LOADING",
            "NVIDIA_VISIBLE_DEVICES", "NVIDIA_DRIVER_CAPABILITIES", "TORCH_CUDA_ARCH_LIST", "TORCH_EXTENSIONS_DIR",
            "TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR", "XDG_CACHE_HOME", "CCACHE_DIR", "OMP_NUM_THREADS",
            "MAX_JOBS")
_NVTX_PUSHPOP, _NVTX_STARTEND, _NVTX_DOMAIN = 59, 60, 75


# --------------------------------------------------------------------------- the tool itself


def version(nsys: Path) -> str | None:
    """`nsys --version`'s version ("2023.4.4.54-234433681190v0"), or None when nsys does not start."""
    return tools.version(nsys, r"version (\S+)")


def importer(nsys: Path) -> Path | None:
    """The report importer nsys calls after a capture (QdstrmImporter), where nsys looks for it, or None."""
    real = nsys.resolve()
    if real.parent.name == "bin":          # a prefix's bin/nsys (a link, or kernellab's wrapper): the CLI beside it
        real = real.parent.parent / "target-linux-x64" / "nsys"
    here = real.parent
    # Beside the CLI, or in a sibling folder: host-linux-x64 (standalone installs, docker/nsight-systems.sh) or
    # linux-desktop-glibc_*-x64 (the copy inside Nsight Compute's folder).
    siblings = sorted(here.parent.glob("*/QdstrmImporter"), key=lambda p: p.parent.name != "host-linux-x64")
    for candidate in (here / "QdstrmImporter", *siblings):
        if os.access(candidate, os.X_OK):
            return candidate
    return None


def importer_works(nsys: Path) -> str | None:
    """None when the importer starts; else what is wrong, in one sentence."""
    found = importer(nsys)
    if found is None:
        return (f"Nsight Systems at {nsys} has no report importer (QdstrmImporter) where it looks for one, so a "
                "capture leaves only a .qdstrm; install the full Nsight Systems (or docker/nsight-systems.sh's prefix), "
                "not the CLI alone.")
    result = proc.run([str(found), "--version"], check=False, timeout=60)
    if result.returncode != 0:
        missing = re.findall(r"error while loading shared libraries: (\S+?):", result.stdout + result.stderr)
        why = f"it needs {missing[0]}, which this machine lacks" if missing else f"it exits with code {result.returncode}"
        return (f"Nsight Systems' report importer ({found}) does not start: {why}; install that library beside it "
                "(the GPU-host kit's start-docker.sh does for libdw and libelf), or a complete Nsight Systems.")
    return None


def status(nsys: Path) -> str:
    """`nsys status -e`: what this machine lets a capture do (CPU sampling, perf events), as nsys prints it."""
    result = proc.run([str(nsys), "status", "-e"], check=False, timeout=60)
    return (result.stdout + result.stderr).strip()


def traces_up_to(version: str) -> str | None:
    """The newest CUDA an nsys of this version traces fully (docker/matrix.toml's [nsys]), or None when unknown."""
    from ..image import nsys as facts
    from ..image import targets

    return facts.nsys_traces(targets.load(), version)


def too_old(version: str, cuda: str | None) -> str | None:
    """One sentence when this nsys is older than the program's CUDA (its CUPTI would lose kernels silently)."""
    if not cuda:
        return None
    newest = traces_up_to(version)
    if newest is None or vkey(cuda) <= vkey(newest):
        return None
    return (f"Nsight Systems {version} traces CUDA up to {newest}, and this program uses CUDA {cuda}: an older CUPTI "
            f"records some kernels and silently drops the rest; use an nsys of the CUDA {cuda.split('.')[0]}.x era "
            f"(set KERNELLAB_NSYS, or profile in a target whose nsys matches: docs/profile.md).")


def lost_kernels_hint(version: str, cuda: str | None) -> str:
    """What to suspect when a capture holds fewer kernels than the program launched."""
    newest = traces_up_to(version)
    era = f" (this nsys traces CUDA up to {newest}; the program's CUDA is {cuda or 'unknown'})" if newest else ""
    return (f"an nsys whose CUPTI is older than the program's CUDA loses kernels silently{era}; check `invoke doctor` "
            "and use an nsys at least as new as the CUDA.")


def readiness(nsys: Path | None, has_gpu: bool) -> Readiness:
    """What doctor says about timelines: which nsys, its version, whether its importer works, what it may sample."""
    if nsys is None:
        return Readiness("warn" if has_gpu else "info", "no nsys on this machine (an image's own is used when it "
                         "has one)", "install Nsight Systems, or `bash docker/nsight-systems.sh VERSION PREFIX` "
                         "(Debian's, docs/profile.md), and set KERNELLAB_NSYS")
    found = version(nsys)
    if found is None:
        return Readiness("warn", f"nsys at {nsys} does not start", "reinstall Nsight Systems")
    problem = importer_works(nsys)
    if problem:
        return Readiness("warn", f"nsys {found} at {nsys}; {problem}")
    newest = traces_up_to(found)
    sampling = ("CPU sampling allowed" if sampling_allowed(status(nsys)) else
                "CPU sampling refused here (timelines need none)")
    return Readiness("ok", f"nsys {found} at {nsys} (traces CUDA up to {newest or '?'}); report importer works; "
                     f"{sampling}")


def sampling_allowed(status_text: str) -> bool:
    """Whether `nsys status -e` says CPU sampling works here (it is usually refused in containers)."""
    return bool(re.search(r"CPU Profiling Environment \(process-tree\):\s*OK", status_text))


# --------------------------------------------------------------------------- a capture


def clean_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment a profiled program runs with: KEEP_ENV and KERNELLAB_* from this one, plus `extra`."""
    env = {k: v for k, v in os.environ.items() if k in KEEP_ENV or k.startswith("KERNELLAB_")}
    env.update(extra or {})
    return env


def capture_argv(nsys: Path, out: Path, program: Sequence[str], *, trace: Sequence[str] = TRACE,
                 profiler_range: bool = False, seconds: float | None = None, sample: bool = False,
                 env: dict[str, str] | None = None) -> list[str]:
    """`env -i` (only `env`, default clean_env()) then nsys on `program`, the report to `out` (.nsys-rep).
    profiler_range: only what runs between cudaProfilerStart and cudaProfilerStop is captured."""
    argv = [str(nsys), "profile", "--trace", ",".join(trace), "--output", str(out.with_suffix("")),
            "--force-overwrite", "true", "--export", "none"]
    argv += ["--sample", "process-tree", "--cpuctxsw", "process-tree"] if sample else ["--sample", "none",
                                                                                      "--cpuctxsw", "none"]
    if profiler_range:
        argv += ["--capture-range", "cudaProfilerApi", "--capture-range-end", "stop"]
    if seconds:
        argv += ["--duration", str(max(1, int(seconds)))]
    variables = [f"{k}={v}" for k, v in sorted((clean_env() if env is None else env).items())]
    return ["env", "-i", *variables, *argv, *program]


def capture(nsys: Path, out: Path, program: Sequence[str], *, cuda: bool = True, trace: Sequence[str] | None = None,
            profiler_range: bool = False, seconds: float | None = None, sample: bool = False,
            env: dict[str, str] | None = None) -> Path:
    """Run one capture into `out` (.nsys-rep); the report written (.nsys-rep, or .qdrep from an nsys before 2021.4);
    ProfileError, one sentence, for each way it can fail. trace: default CUDA and NVTX, or (cuda=False) NVTX and OS
    runtime calls; the rest as capture_argv takes them."""
    if sample and not sampling_allowed(status(nsys)):
        raise ProfileError("CPU sampling is not allowed here (`nsys status -e`: perf events refused, as in most "
                           "containers); drop --sample, or capture natively on a host whose "
                           "/proc/sys/kernel/perf_event_paranoid is 2 or lower.")
    reports = (out, out.with_suffix(".qdrep"))   # nsys before 2021.4 (Debian 11's 2020.4) writes .qdrep
    for stale in (*reports, out.with_suffix(".qdstrm"), out.with_suffix(".sqlite")):
        stale.unlink(missing_ok=True)
    traced = trace or (TRACE if cuda else ("nvtx", "osrt"))
    result = proc.run(capture_argv(nsys, out, program, trace=traced, profiler_range=profiler_range, seconds=seconds,
                                   sample=sample, env=env), check=False)
    output = result.stdout + result.stderr
    written = next((r for r in reports if r.exists()), None)
    if written is None:
        if out.with_suffix(".qdstrm").exists():
            problem = importer_works(nsys) or "its importer failed on it"
            raise ProfileError(f"nsys left only a .qdstrm ({out.with_suffix('.qdstrm')}), no report: {problem}")
        raise ProfileError(f"nsys wrote no report (exit code {result.returncode}){_why(output)}.")
    if result.returncode != 0 and not seconds:  # past --duration nsys stops the program itself
        raise ProfileError(f"the profiled program failed under nsys (exit code {result.returncode}){_why(output)}.")
    return written


def _why(output: str) -> str:
    """': ' and the reason in a capture's output: the profiled child's own sentence (`kernellab: ...`) where it said
    one, else the last line (nsys's own words follow the child's)."""
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    own = [line.removeprefix("kernellab: ") for line in lines if line.startswith("kernellab: ")]
    last = (own or lines)[-1:]
    return f": {last[0].rstrip('.')}" if last else ""


def export(nsys: Path, report: Path) -> Path:
    """nsys's own SQLite export of `report`, made afresh (an old .sqlite beside it is never read)."""
    db = report.with_suffix(".sqlite")
    db.unlink(missing_ok=True)
    result = proc.run([str(nsys), "export", "--type", "sqlite", "--force-overwrite", "true", "--output", str(db),
                       str(report)], check=False)
    if result.returncode != 0 or not db.exists():
        tail = [line for line in (result.stdout + result.stderr).splitlines() if line.strip()][-1:]
        raise ProfileError(f"nsys could not export {report.name} to SQLite{': ' + tail[0] if tail else ''}.")
    return db


# --------------------------------------------------------------------------- what it recorded


@dataclass(frozen=True)
class Kernel:
    name: str            # demangled, without parameters
    start: int           # GPU ns, the capture's clock
    end: int
    stream: int
    launched: int | None  # CPU ns of the API call that launched it (None: unknown)
    thread: int | None    # the launching thread (nsys's globalTid)

    @property
    def ns(self) -> int:
        return self.end - self.start


@dataclass(frozen=True)
class Range:
    name: str            # "domain:text" for a range of a named domain
    start: int
    end: int
    thread: int | None
    kind: str            # push/pop or start/end

    @property
    def ns(self) -> int:
        return self.end - self.start


@dataclass(frozen=True)
class Copy:
    kind: str            # "memcpy HtoD", "memset", ...
    bytes: int
    start: int
    end: int


@dataclass
class Capture:
    """What one report recorded: its kernels, NVTX ranges and copies, with the export's provenance."""

    schema: str
    nsys_version: str
    kernels: list[Kernel] = field(default_factory=list)
    ranges: list[Range] = field(default_factory=list)
    copies: list[Copy] = field(default_factory=list)
    os_calls: list[Range] = field(default_factory=list)   # OS runtime calls (osrt), nsys's own markers included


def read(db: Path) -> Capture:
    """The kernels, ranges and copies of an nsys SQLite export; ProfileError for a schema this reader does not know."""
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        meta = dict(con.execute("SELECT name, value FROM META_DATA_EXPORT")) if "META_DATA_EXPORT" in tables else {}
        schema = str(meta.get("EXPORT_SCHEMA_VERSION", "?"))
        if schema.split(".")[0] not in SCHEMA_MAJORS:
            raise ProfileError(f"{db.name} has export schema {schema}; kernellab reads schema "
                               f"{' or '.join(m + '.x' for m in SCHEMA_MAJORS)} (nsys 2020.4 to 2025.3): use one of those.")
        strings = dict(con.execute("SELECT id, value FROM StringIds")) if "StringIds" in tables else {}
        capture = Capture(schema, str(meta.get("EXPORT_PRODUCT_VERSION", "?")))
        capture.kernels = _kernels(con, tables, strings)
        capture.ranges = _ranges(con, tables, strings)
        capture.copies = _copies(con, tables)
        capture.os_calls = _os_calls(con, tables, strings)
        return capture
    except sqlite3.DatabaseError as e:
        raise ProfileError(f"{db} is not a readable nsys export ({e}); capture again.") from None
    finally:
        con.close()


def _columns(con: sqlite3.Connection, table: str) -> set[str]:
    return {r[1] for r in con.execute(f"PRAGMA table_info({table})")}


def _kernels(con: sqlite3.Connection, tables: set[str], strings: dict[int, str]) -> list[Kernel]:
    if "CUPTI_ACTIVITY_KIND_KERNEL" not in tables:
        return []
    launches: dict[int, tuple[int, int]] = {}
    if "CUPTI_ACTIVITY_KIND_RUNTIME" in tables:
        launches = {c: (s, t) for c, s, t in con.execute(
            "SELECT correlationId, start, globalTid FROM CUPTI_ACTIVITY_KIND_RUNTIME")}
    cols = _columns(con, "CUPTI_ACTIVITY_KIND_KERNEL")
    name_col = "shortName" if "shortName" in cols else "demangledName"
    out = []
    for start, end, stream, corr, name_id in con.execute(
            f"SELECT start, end, streamId, correlationId, {name_col} FROM CUPTI_ACTIVITY_KIND_KERNEL ORDER BY start"):
        name = strings.get(name_id, str(name_id)) if isinstance(name_id, int) else str(name_id)
        launched, thread = launches.get(corr, (None, None))
        out.append(Kernel(name, start, end, stream, launched, thread))
    return out


def _ranges(con: sqlite3.Connection, tables: set[str], strings: dict[int, str]) -> list[Range]:
    if "NVTX_EVENTS" not in tables:
        return []
    cols = _columns(con, "NVTX_EVENTS")
    text_id = "textId" if "textId" in cols else "NULL"
    domains: dict[int, str] = {}
    rows = list(con.execute(f"SELECT start, end, eventType, text, {text_id}, globalTid, domainId FROM NVTX_EVENTS"))
    for _s, _e, kind, text, _t, _g, domain in rows:
        if kind == _NVTX_DOMAIN and text:
            domains[domain] = text
    out = []
    for start, end, kind, text, tid, thread, domain in rows:
        if kind not in (_NVTX_PUSHPOP, _NVTX_STARTEND) or end is None:
            continue
        name = text if text is not None else strings.get(tid, "?") if tid is not None else "?"
        if domain and domain in domains:
            name = f"{domains[domain]}:{name}"
        out.append(Range(name, start, end, thread, "push/pop" if kind == _NVTX_PUSHPOP else "start/end"))
    return sorted(out, key=lambda r: (r.start, -r.end))


def _os_calls(con: sqlite3.Connection, tables: set[str], strings: dict[int, str]) -> list[Range]:
    if "OSRT_API" not in tables:
        return []
    return [Range(strings.get(name_id, "?"), start, end, thread, "osrt")
            for start, end, name_id, thread in con.execute("SELECT start, end, nameId, globalTid FROM OSRT_API "
                                                           "ORDER BY start")]


_COPY_KINDS = {1: "HtoD", 2: "DtoH", 3: "HtoA", 4: "AtoH", 5: "AtoA", 6: "AtoD", 7: "DtoA", 8: "DtoD", 9: "HtoH",
               10: "PtoP"}


def _copies(con: sqlite3.Connection, tables: set[str]) -> list[Copy]:
    out = []
    if "CUPTI_ACTIVITY_KIND_MEMCPY" in tables:
        for start, end, size, kind in con.execute("SELECT start, end, bytes, copyKind FROM CUPTI_ACTIVITY_KIND_MEMCPY"):
            out.append(Copy(f"memcpy {_COPY_KINDS.get(kind, kind)}", size, start, end))
    if "CUPTI_ACTIVITY_KIND_MEMSET" in tables:
        for start, end, size in con.execute("SELECT start, end, bytes FROM CUPTI_ACTIVITY_KIND_MEMSET"):
            out.append(Copy("memset", size, start, end))
    return sorted(out, key=lambda c: c.start)
