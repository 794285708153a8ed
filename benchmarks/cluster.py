"""A cluster run's overhead: a 4-task array on Slurm against the same tasks run directly (issue 9).

    python benchmarks/cluster.py [--runtime none|docker|podman|charliecloud|apptainer|enroot]
                                 [--gpu-type TYPE] [--tasks 4] [--seconds 10] [--target cpu]
                                 [--shared DIR] [--partition P] [--account A] [--json PATH] [--keep]

Goals: submit -> merged results within 1.15x of running the same tasks directly (queue wait
excluded); a second submission of the same image converts nothing (0 s).

The work. Each task runs `python3 benchmarks/cluster.py --work N` in the run's snapshot: N rounds
of SHA-256, N calibrated here to take about --seconds on this machine. It is a fixed amount of
work, not a fixed time, so a runtime that slows the task down shows in the figures. Every task
writes its digest; all of them (Slurm and direct) must agree.

The profile is written to a fresh temporary folder, which is also the shared folder (under
--shared, default the system's temporary folder: right for the one-node Slurm of the tests; on
a real cluster give a folder every node sees). Its one GPU type is --gpu-type, by default the
first typed gres that `sinfo` reports, asked for as `--gres=gpu:TYPE:1`.

Slurm. `kernellab.cluster.runs.start` submits the array (`invoke submit --tasks 4` in Python),
follows it polling every second (KERNELLAB_POLL_S=1; the default is 5 s), then gathers and merges.
The wall time W runs from the call to its return, merged results written. It splits exactly into:
  submit   the call until sbatch answered (plan, image check, repository snapshot, sbatch)
  waiting  after sbatch, the time no task of the run was running: before the first task started
           and between one task's end and the next one's start
  running  the time some task was running (from the start and end stamps in the status files)
  after    the last task's end until the return: the last poll, gathering, merging
With runtime docker, podman, charliecloud, apptainer or enroot it submits twice: the first
submission converts the image into the (empty) shared folder, the second must find it and
convert nothing. Both read `image.convert_s` and `image.reused` from results/<run>/cluster.json.
The ratios use the last submission, so a one-off conversion is reported apart from them.

Direct. The same plan (the same task commands and variables) is run by kernellab's own task
runner (`python3 -m kernellab.cluster.node PLAN GPU INDEX`, what each array task executes),
without Slurm, from a second snapshot. It runs the tasks as many at a time as Slurm ran them
(the most that overlapped in the Slurm run). That is the fair comparison: the array's tasks each
ask for one GPU of the type, so a node with one GPU of it (as here) runs them one after another,
and running them side by side directly would compare against a machine Slurm never offered.
D is the wall time of the direct run, snapshot excluded (it is part of the cluster's overhead).

The ratios.
  raw           W / D
  queue wait    (W - waiting + start-ups) / D. A start-up is the task runner's own time outside
  excluded      its status stamps (Python start, imports, writing the status file), measured per
                task in the direct run; their sum is put back (waiting is never taken below 0),
                because the direct run pays them too and in Slurm they fall in `waiting`. The
                status files cannot tell queue wait proper (another job holding the GPU) from
                Slurm's own dispatch latency (scheduling, launching the batch step): both leave
                the GPU idle, and this figure excludes both. The raw ratio keeps both; `waiting` is printed so you can judge.
  at equal      (direct running + Slurm's overhead, queue wait excluded) / D. On a shared machine
  task time     the tasks' own seconds vary by more than the overhead being measured (other work
                takes the CPU); this puts the direct run's task time on both sides, so only what
                each side spends beyond its tasks differs (Slurm: submit, waiting less start-ups,
                after; direct: the start-ups).
Node and submit-host clocks are compared in the split (the status files' stamps): on a real
cluster they must agree (NTP); on the one-node Slurm they are one clock.
"""
from __future__ import annotations

import argparse
import concurrent.futures
import hashlib
import io
import json
import math
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
GOAL = 1.15
RUNTIMES = ("none", "docker", "podman", "charliecloud", "apptainer", "enroot")


# ---------------------------------------------------------------- the task (runs on the node; standard library only)


def chain(rounds: int) -> str:
    digest = b"kernellab cluster benchmark"
    for _ in range(rounds):
        digest = hashlib.sha256(digest).digest()
    return digest.hex()


def work(rounds: int) -> int:
    """The task: `rounds` rounds of SHA-256; work.json (digest, seconds) into $KERNELLAB_RESULTS."""
    t0 = time.perf_counter()
    digest = chain(rounds)
    seconds = time.perf_counter() - t0
    out = Path(os.environ.get("KERNELLAB_RESULTS") or ".")
    out.mkdir(parents=True, exist_ok=True)
    (out / "work.json").write_text(json.dumps({"rounds": rounds, "digest": digest, "seconds": round(seconds, 3),
                                               "task": os.environ.get("KERNELLAB_TASK")}) + "\n")
    print(f"{rounds} rounds in {seconds:.2f} s: {digest[:16]}", flush=True)
    return 0


def calibrate(seconds: float) -> int:
    """The rounds that take about `seconds` here (measured over 0.5 s, after a short warm-up)."""
    chain(20_000)
    rounds, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < 0.5:
        chain(20_000)
        rounds += 20_000
    return max(1, int(rounds / (time.perf_counter() - t0) * seconds))


# ---------------------------------------------------------------- measuring


class Echo(io.StringIO):
    """What runs.start prints, passed on indented, each line stamped with the time it was printed."""

    def __init__(self) -> None:
        super().__init__()
        self.lines: list[tuple[float, str]] = []
        self._part = ""

    def write(self, s: str) -> int:
        self._part += s
        while "\n" in self._part:
            line, self._part = self._part.split("\n", 1)
            self.lines.append((time.time(), line))
            print(f"    | {line}", flush=True)
        return len(s)


def first_gres_type(partition: str = "") -> str:
    """The first typed GPU gres sinfo reports (gpu:h100:1 -> h100)."""
    argv = ["sinfo", "-h", "-o", "%G", *(["-p", partition] if partition else [])]
    try:
        r = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=True)
    except (OSError, subprocess.SubprocessError) as e:
        raise SystemExit(f"cluster.py: sinfo failed ({e}); is Slurm up here? (tests/slurm/start-slurm.sh)") from None
    m = re.search(r"gpu:([A-Za-z0-9_.-]+):\d+", r.stdout)
    if not m:
        raise SystemExit(f"cluster.py: sinfo reports no typed GPU gres ({r.stdout.strip() or 'none'}); "
                         "pass --gpu-type and, if needed, --partition.")
    return m.group(1)


def write_profile(folder: Path, args: argparse.Namespace, gres: str) -> tuple[Path, str]:
    """The benchmark's cluster profile, in folder (also the shared folder); its path and the GPU type's key."""
    key = re.sub(r"[^a-z0-9_-]+", "-", gres.lower())
    if not key[:1].isalpha():
        key = "g" + key
    minutes = max(10, math.ceil(args.seconds * 3 / 60) + 5)
    lines = [f"runtime = {json.dumps(args.runtime)}", f"shared = {json.dumps(str(folder))}",
             f"time = \"{minutes}\"", f"python = {json.dumps(args.python)}"]
    lines += [f"partition = {json.dumps(args.partition)}"] * bool(args.partition)
    lines += [f"account = {json.dumps(args.account)}"] * bool(args.account)
    lines += ["[gpu_types]", f"{key} = {json.dumps(f'--gres=gpu:{gres}:1')}"]
    path = folder / "cluster.toml"
    path.write_text("\n".join(lines) + "\n")
    return path, key


def intervals(statuses: list[dict[str, Any]]) -> list[tuple[float, float]]:
    return sorted((float(s["started"]), float(s["finished"])) for s in statuses)


def most_overlapping(spans: list[tuple[float, float]]) -> int:
    events = sorted([(a, 1) for a, _ in spans] + [(b, -1) for _, b in spans])
    now = best = 0
    for _, step in events:
        now += step
        best = max(best, now)
    return max(best, 1)


def split(t0: float, submitted: float, t1: float, spans: list[tuple[float, float]]) -> dict[str, Any]:
    """W = submit + waiting + running + after (see the module's docstring)."""
    running, waiting, edge = 0.0, 0.0, submitted
    gaps = []
    for a, b in spans:
        if a > edge:
            gaps.append(a - edge)
            waiting += a - edge
        running += max(0.0, b - max(a, edge))
        edge = max(edge, b)
    return {"wall_s": t1 - t0, "submit_s": submitted - t0, "waiting_s": waiting, "running_s": running,
            "after_s": t1 - edge, "gaps_s": [round(g, 3) for g in gaps]}


def slurm_run(profile: Any, gpu: str, command: str, args: argparse.Namespace, made: list[Path]) -> dict[str, Any]:
    """One submission through kernellab.cluster.runs.start; its timings, image record and work digests."""
    from kernellab.cluster import runs

    req = runs.Request(kind="submit", gpus=gpu, command=("bash", "-c", command), tasks=args.tasks,
                       target=args.target, argv=sys.argv)
    echo = Echo()
    t0 = time.time()
    try:
        local = runs.start(req, profile, out=echo)
    finally:  # a failed run still gathered into results/<run>/: remember it for the clean-up
        made += [Path(line.split(": ", 1)[1]) for _, line in echo.lines if line.startswith("results: ")]
    t1 = time.time()
    submitted = [t for t, line in echo.lines if line.startswith("submitted job ")]
    record = json.loads((local / "cluster.json").read_text())
    statuses = [t["status"] for t in record["tasks"]]
    spans = intervals(statuses)
    digests = {json.loads((local / t["gpu"] / t["name"] / "work.json").read_text())["digest"]
               for t in record["tasks"]}
    return {"run": record["run"], "local": str(local), "rundir": record["rundir"], "jobs": record["jobs"],
            **split(t0, submitted[-1] if submitted else t0, t1, spans),
            "task_s": [s["seconds"] for s in statuses], "concurrency": most_overlapping(spans),
            "image": record.get("image") or {}, "digests": sorted(digests)}


def direct_run(rundir: str, shared: Path, python: str, concurrency: int) -> dict[str, Any]:
    """The Slurm run's plan, run again by kernellab's task runner without Slurm; its timings and digests."""
    from kernellab.cluster.plan import Plan, snapshot

    plan = Plan.load(Path(rundir) / "plan.json")
    plan.rundir, plan.jobs = str(shared / "direct" / plan.run), {}
    snapshot(plan.workspace, ROOT)
    path = plan.save()
    env = {**os.environ, "PYTHONPATH": str(plan.workspace / "src")}
    for k in [k for k in env if k.startswith("SLURM_")]:
        del env[k]

    def one(i: int) -> float:
        t = time.time()
        r = subprocess.run([python, "-m", "kernellab.cluster.node", str(path), plan.tasks[i].gpu,
                            str(plan.tasks[i].index)], env=env, capture_output=True, text=True)
        if r.returncode:
            raise SystemExit(f"cluster.py: the direct run of {plan.tasks[i].key} failed ({r.returncode}):\n"
                             f"{(r.stdout + r.stderr)[-2000:]}")
        return time.time() - t

    t0 = time.time()
    with concurrent.futures.ThreadPoolExecutor(max_workers=concurrency) as pool:
        walls = list(pool.map(one, range(len(plan.tasks))))
    wall = time.time() - t0
    statuses = [json.loads(plan.status_file(t).read_text()) for t in plan.tasks]
    digests = {json.loads((plan.workspace / plan.results_of(t) / "work.json").read_text())["digest"]
               for t in plan.tasks}
    startup = [w - s["seconds"] for w, s in zip(walls, statuses)]
    running = split(t0, t0, t0 + wall, intervals(statuses))["running_s"]
    return {"wall_s": wall, "running_s": running, "task_s": [s["seconds"] for s in statuses],
            "startup_s": [round(x, 3) for x in startup], "concurrency": concurrency, "digests": sorted(digests)}


# ---------------------------------------------------------------- report


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--work", type=int, metavar="ROUNDS", help=argparse.SUPPRESS)  # the task itself
    ap.add_argument("--runtime", default="none", choices=RUNTIMES)
    ap.add_argument("--gpu-type", help="the gres type to ask for (default: the first typed gres sinfo reports)")
    ap.add_argument("--tasks", type=int, default=4)
    ap.add_argument("--seconds", type=float, default=10.0, help="about how long each task computes (default 10)")
    ap.add_argument("--target", help="image target for container runtimes (default: this machine's)")
    ap.add_argument("--python", default="python3", help="the nodes' Python (profile key `python`)")
    ap.add_argument("--shared", type=Path, help="where to make the temporary shared folder (every node must see it)")
    ap.add_argument("--partition", default="")
    ap.add_argument("--account", default="")
    ap.add_argument("--poll-s", type=float, default=1.0, help="KERNELLAB_POLL_S for the runs (default 1)")
    ap.add_argument("--json", type=Path, help="also write the figures here")
    ap.add_argument("--keep", action="store_true", help="keep the shared folder and results/<run>/ folders")
    args = ap.parse_args(argv)
    if args.work is not None:
        return work(args.work)
    if args.tasks < 1 or args.seconds <= 0:
        ap.error("--tasks and --seconds must be positive")

    sys.path.insert(0, str(ROOT / "src"))
    os.environ["KERNELLAB_POLL_S"] = f"{args.poll_s:g}"
    from kernellab.cluster import profile as profiles
    from kernellab.errors import KernellabError

    gres = args.gpu_type or first_gres_type(args.partition)
    base = Path(tempfile.mkdtemp(prefix="kl-cluster-bench-", dir=args.shared))
    made: list[Path] = []
    try:
        path, gpu = write_profile(base, args, gres)
        prof = profiles.load(path)
        rounds = calibrate(args.seconds)
        # Runtime none runs the task in the nodes' Python; the images have python3 on PATH.
        task_python = args.python if args.runtime == "none" else "python3"
        command = f"{shlex.quote(task_python)} benchmarks/cluster.py --work {rounds}"
        print(f"cluster benchmark: {args.tasks} tasks of `{command}` (about {args.seconds:g} s each here) "
              f"on gres gpu:{gres}, runtime {args.runtime}, shared folder {base}; "
              f"polling every {args.poll_s:g} s (KERNELLAB_POLL_S={args.poll_s:g}; the default is 5 s)", flush=True)
        submissions = 2 if args.runtime != "none" else 1
        slurm: list[dict[str, Any]] = []
        direct: dict[str, Any] = {}
        for k in range(submissions):
            what = " (the image is converted here)" if submissions == 2 and k == 0 else \
                " (the same image again)" if k else ""
            print(f"\nslurm submission {k + 1}{what}:", flush=True)
            slurm.append(slurm_run(prof, gpu, command, args, made))
            if k == 0:
                print(f"\ndirect: the same {args.tasks} tasks through kernellab's task runner, "
                      f"{slurm[0]['concurrency']} at a time (as Slurm ran them) ...", flush=True)
                direct = direct_run(slurm[0]["rundir"], base, args.python, slurm[0]["concurrency"])
    except KernellabError as e:
        print(f"cluster.py: {e}", file=sys.stderr)
        return 1
    finally:
        if not args.keep:
            shutil.rmtree(base, ignore_errors=True)
            for folder in made:
                shutil.rmtree(folder, ignore_errors=True)

    last = slurm[-1]
    n = args.tasks
    startup = sum(direct["startup_s"])
    excluded = last["wall_s"] - max(0.0, last["waiting_s"] - startup)
    raw_ratio, ratio = last["wall_s"] / direct["wall_s"], excluded / direct["wall_s"]
    # What each side spends beyond its tasks' own running time; the tasks' times vary with the
    # machine's load, these do much less.
    over_slurm, over_direct = excluded - last["running_s"], direct["wall_s"] - direct["running_s"]
    equal = (direct["running_s"] + over_slurm) / direct["wall_s"]
    digests = {d for r in [*slurm, direct] for d in r["digests"]}
    figures = {
        "host": os.uname().nodename, "runtime": args.runtime, "gres": f"gpu:{gres}", "tasks": n,
        "rounds": rounds, "poll_s": args.poll_s, "slurm": slurm, "direct": direct,
        "wall_queue_wait_excluded_s": round(excluded, 3), "ratio_raw": round(raw_ratio, 3),
        "ratio_queue_wait_excluded": round(ratio, 3), "overhead_slurm_s": round(over_slurm, 3),
        "overhead_direct_s": round(over_direct, 3), "ratio_at_equal_task_time": round(equal, 3),
        "goal": GOAL, "digests_agree": len(digests) == 1,
        "image_convert_s": [r["image"].get("convert_s") for r in slurm],
        "image_reused": [r["image"].get("reused") for r in slurm],
    }
    print("\nfigures (seconds; wall = submit (to sbatch's answer) + waiting (no task of the run running:")
    print("Slurm's dispatch and any queue wait) + running (some task running) + after (last poll, gather, merge))")
    for k, r in enumerate(slurm):
        print(f"  slurm {k + 1} ({r['run']}): wall {r['wall_s']:.2f} = submit {r['submit_s']:.2f} + waiting "
              f"{r['waiting_s']:.2f} + running {r['running_s']:.2f} + after {r['after_s']:.2f}; "
              f"tasks {' '.join(f'{s:.2f}' for s in r['task_s'])}; at most {r['concurrency']} at once; "
              f"gaps {' '.join(f'{g:.2f}' for g in r['gaps_s'])}")
    print(f"  direct: wall {direct['wall_s']:.2f}; tasks {' '.join(f'{s:.2f}' for s in direct['task_s'])}; "
          f"task runner start-up {' '.join(f'{s:.2f}' for s in direct['startup_s'])}; {direct['concurrency']} at once")
    print(f"  work: {len(digests)} digest(s) over {n * (len(slurm) + 1)} tasks"
          + (" (all agree)" if len(digests) == 1 else " (THEY DIFFER)"))
    print(f"\nratio, slurm submission {len(slurm)} / direct (goal <= {GOAL}x with queue wait excluded)")
    print(f"  raw:                 {last['wall_s']:.2f} / {direct['wall_s']:.2f} = {raw_ratio:.3f}x")
    print(f"  queue wait excluded: ({last['wall_s']:.2f} - {last['waiting_s']:.2f} + {startup:.2f}) / "
          f"{direct['wall_s']:.2f} = {ratio:.3f}x  ({'met' if ratio <= GOAL else 'missed'})")
    print("    (waiting taken out, less the task runner's start-ups, which the direct run pays too; the status")
    print("    files cannot tell queue wait from Slurm's own dispatch latency, so both are taken out)")
    print(f"  beyond the tasks' own running time: slurm {over_slurm:.2f} s (queue wait excluded), direct "
          f"{over_direct:.2f} s;\n  so with the direct run's task times: ({direct['running_s']:.2f} + {over_slurm:.2f}) / "
          f"{direct['wall_s']:.2f} = {equal:.3f}x")
    print("\nimage conversion (results/<run>/cluster.json: image.convert_s, image.reused)")
    if args.runtime == "none":
        print("  runtime none: no image, nothing to convert")
    for k, r in enumerate(slurm if args.runtime != "none" else []):
        im = r["image"]
        print(f"  submission {k + 1}: {im.get('convert_s')} s, reused {str(im.get('reused')).lower()} "
              f"({im.get('ref')} {str(im.get('id', ''))[7:19]} -> {im.get('path')})")
    if args.runtime != "none":
        second = slurm[-1]["image"]
        print(f"  second submission converts nothing: {'yes' if second.get('reused') and not second.get('convert_s') else 'NO'}")
    if args.keep:
        print(f"\nkept: {base} and {', '.join(str(p) for p in made)}")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(figures, indent=1) + "\n")
        print(f"figures: {args.json}")
    return 0 if len(digests) == 1 else 1


if __name__ == "__main__":
    sys.exit(main())
