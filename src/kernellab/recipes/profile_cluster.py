"""`invoke recipe profile NAME --on slurm`: one case of a recipe's experiment captured under Nsight Systems on each
GPU type of a cluster, in the recipe's image built here (kernellab.recipes.profile's checks and its job: the task is
`invoke submit`'s kind, `bash -c` running kernellab.recipes.capture with KERNELLAB_OUT its results folder), then
each task's folder made into a profile as a local one is (profile.report, from the SQLite its node exported: no
nsys here) and one table of the top kernels per GPU type in the run's summary. `--resume RUN` as for every run."""
from __future__ import annotations

import json
import shlex
import sys
import time
from pathlib import Path
from typing import IO, TYPE_CHECKING, Sequence

from .. import jobs
from ..engine import Image, resolve_engine
from ..errors import ClusterUsageError, ProfileError, RecipeError
from ..nsight import timeline
from . import build as builds
from . import capture, experiments
from . import profile as profiles

if TYPE_CHECKING:
    from ..cluster.follow import Outcome


def job(name: str, *, experiment: str | None = None, case: str | None = None, tool: str = "nsys",
        kernel: str | None = None, clocks: bool = False, target: str | None = None, seconds: float = capture.SECONDS,
        dry_run: bool = False, out: IO[str] = sys.stdout) -> tuple[jobs.Job, Image]:
    """`--on slurm`: the image built here (cached) and the job that captures the case in it once per GPU type (its
    report named after the type: `<gpu type>-<case>.nsys-rep`); merge() makes each task's folder a profile and the
    run's summary a table of the top kernels per GPU type."""
    if tool == "ncu":
        raise ClusterUsageError("--tool ncu profiles the kernels the timeline ranks first, which a cluster task cannot "
                                "hand back in between; profile with nsys on the cluster, and with --tool ncu on a GPU "
                                "node itself.")
    recipe, exp, params, spec = profiles.check_case(name, experiment, case, tool, kernel, target, seconds, clocks)
    if exp.inputs:
        raise RecipeError(f"{exp.name} reads inputs (datasets), which a cluster task does not carry to its node yet; "
                          f"profile it here with `invoke recipe profile {recipe.name}`.")
    eng = resolve_engine(None).require()
    built = builds.build(recipe, target=target, engine=eng, out=out)
    doc = profiles.about(recipe, exp, params, spec, built, eng, with_gpu=bool(spec.cuda), seconds=seconds, tool=tool)
    key = experiments.slug(exp.name, params)
    words = [shlex.quote(a) for a in profiles.capture_argv(doc, key)]
    words[words.index("--stem") + 1] = f'"$KERNELLAB_GPU_TYPE"-{shlex.quote(key)}'
    line = 'KERNELLAB_OUT="$KERNELLAB_RESULTS" exec ' + " ".join(words)
    if dry_run:
        print(f"# each task runs, in {built.tags[0]} ({built.image_id[:19]}), from /workspace:\n# {line} --about "
              "'<profile.json's start: the recipe's provenance>'", file=out)
    argv = ("bash", "-c", f"{line} --about " + shlex.quote(json.dumps(doc, separators=(",", ":"))))
    return jobs.Job("recipe-profile", argv, merger=f"{__name__}:merge"), built.image


def merge(local: Path, gpus: Sequence[str], outcomes: Sequence[Outcome]) -> str:
    """Each task's folder (local/<gpu>/<task>/) made a profile as `invoke recipe profile` leaves one, from the export
    its node made (report()); returns the top kernels per GPU type for the run's summary."""
    rows, title, made = [], "", []
    for o in outcomes:
        g, name, st = o.task.gpu, o.task.name, o.status
        folder = local / g / name
        status = json.loads((folder / capture.STATUS).read_text()) if (folder / capture.STATUS).is_file() else {}
        doc = status.get("about") or {}
        title = title or f": {doc['recipe']}, {doc['experiment']} {profiles.shown(doc['case'])}" if doc else title
        if not status or status.get("problem"):
            rows.append(f"| {g} | {status.get('problem') or 'no profile: the task table below says why'} | | |")
            continue
        gpu_name = (st.get("gpus") or [{}])[0].get("name")
        machine = {"gpu": {"name": gpu_name} if gpu_name else None, "driver": None, "clocks": {},
                   "host": st.get("host"), "gpu_type": g}
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(st["started"])) if st.get("started") else None
        try:
            full = (json.loads((folder / "profile.json").read_text()) if (folder / "profile.json").is_file()
                    and not (folder / status["report"]).with_suffix(".sqlite").is_file()   # merged before
                    else profiles.report(folder, doc, status, machine, date=stamp))
        except ProfileError as e:
            rows.append(f"| {g} | {e} | | |")
            continue
        made.append(f"`{g}/{name}/summary.md`")
        top = full.get("top_kernels") or []
        rows += [f"| {g} | `{timeline.short(r['kernel'], 60)}` | {timeline.us(r['total_ns'])} | {100 * r['share']:.1f}% |"
                 for r in top] or [f"| {g} | none: " + ("CUDA was not traced (a CPU case)" if not full["cuda"] else
                                                       "the case launched no kernel")
                                   + (f"; the case took {full['case_seconds']:g} s" if full.get("case_seconds") else "")
                                   + " | | |"]
    return "\n".join([f"## Top kernels by GPU time, per GPU type{title}", "",
                      "| GPU type | kernel | GPU time | share |", "|---|---|---:|---:|", *rows, "",
                      f"Each task's profile: {', '.join(made) or 'none'} (with profile.json, timeline.png, the report "
                      "named after the task and the case's output)."])
