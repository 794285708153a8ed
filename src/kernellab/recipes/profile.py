"""`invoke recipe profile NAME`: where a paper's time goes, for one case of one experiment, run as the recipe runs
it (the same command, cwd and values, in the recipe's image, the GPU attached when the target has CUDA) under
Nsight Systems, and with `--tool ncu` Nsight Compute's counters of the kernels the timeline ranks first.

The capture runs inside the container as a job of its own (kernellab.recipes.capture: it finds nsys, the image's
or the host's mounted read-only, refuses in one sentence before capturing, captures the case's bash command with a
scrubbed environment and exports the SQLite). This side chooses the case, builds the image (cached), reads the
export back and writes the folder, `results/recipes/<name>/profiles/<date>-<time>-<case>/`: summary.md,
profile.json, timeline.png, the .nsys-rep and the case's output; made as `<folder>.partial` and renamed at the end.
`--on slurm` (kernellab.recipes.profile_cluster) runs the same job as a cluster task and the same report() after it.
"""
from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import IO, Any, Callable, Mapping, cast

from .. import count, jobs, places, proc
from ..container.runner import gpu_choice
from ..engine import Engine, resolve_engine
from ..errors import ProfileError, RecipeError
from ..image.spec import Spec
from ..nsight import ncu, nsys, timeline, tools
from ..nsight import report as ncu_report
from ..places import DEFAULT, Flags, Place
from ..provenance import Checkout, Machine, now
from . import build as builds
from . import checks, experiments, inputs, manifest, model, read, record, reproduce
from .capture import (
    CLOCKS_NEED_NCU,
    OUTPUT,
    SECONDS,
    STATUS,
    TOOLS,
    About,
    Counters,
    Nsys,
    OsCall,
    Profile,
    Status,
    TopKernel,
)

TOP = 3                     # kernels Nsight Compute profiles when --kernel names none
LOG = "profile.log"         # what the job in the image printed


def choose_case(recipe: model.Recipe, experiment: str | None, case: str | None) -> tuple[model.Experiment, model.Params]:
    """The experiment (default: the first) and its grid point that `--case k=v,k=v` names (default: the first)."""
    exp = recipe.experiment(experiment) if experiment else recipe.experiments[0]
    points = exp.cases()
    shown = [" ".join(f"{k}={v}" for k, v in p.items()) or "(one case)" for p in points]
    if not case:
        return exp, points[0]
    wanted = dict(part.strip().split("=", 1) for part in re.split(r"[,\s]+", case.strip()) if "=" in part)
    if wanted and not wanted.keys() - points[0].keys():
        found = [p for p in points if all(str(p[k]) == v.strip() for k, v in wanted.items())]
        if found:
            return exp, found[0]
    raise RecipeError(f"--case {case!r} is no case of {recipe.name}'s experiment {exp.name}; its cases: "
                      f"{', '.join(shown)}.")


def profile(name: str, *, experiment: str | None = None, case: str | None = None, tool: str = "nsys",
            kernel: str | None = None, clocks: bool = False, where: Flags = DEFAULT, seconds: float = SECONDS,
            results: Path = record.RESULTS, engine: Engine | None = None, place: Place | None = None,
            out: IO[str] = sys.stdout) -> Path:
    """Capture one case under nsys (and ncu with tool="ncu"; `clocks`: ncu again at the GPU's own clocks) where the
    place flags say; return the finished folder."""
    target, gpu_mode, host = where.target, gpu_choice(where.gpu_mode), places.hosted(where.host)
    recipe, exp, params, spec = check_case(name, experiment, case, tool, kernel, target, seconds, clocks)
    checks.check_gpu_mode(recipe, spec, gpu_mode)
    gpus = reproduce.chosen_gpus_of(where.gpu_index, host)
    with_gpu = bool(spec.cuda) and gpu_mode is not False and bool(gpus)
    if tool == "ncu":
        _check_ncu(spec.target, with_gpu)
    inside_nsys = _host_override("nsys")
    eng = resolve_engine(engine).require()
    built = builds.build(recipe, target=target, engine=eng, out=out)
    place = place or places.container(where, built.image, host, eng)
    ready = inputs.prepare_all(recipe, inputs.needed([exp]), place=place, out=out)
    doc = about(recipe, exp, params, spec, built, eng, with_gpu=with_gpu, seconds=seconds, tool=tool)
    key = experiments.slug(exp.name, params)
    partial, final = _folders(results / recipe.name / "profiles", key)
    argv = [*capture_argv(doc, key), *(["--nsys", inside_nsys] if inside_nsys else [])]
    job = jobs.Job("recipe-profile", tuple(argv), gpu=with_gpu, tools=("nsys",), scratch=partial,
                   output=partial / LOG, timeout=seconds + 300, mounts=inputs.mounts(ready, exp))
    try:
        out.write(f"profile: {recipe.name} {key} under nsys, at most {seconds:g} s ...\n")
        out.flush()
        status = _inside(place, job, partial)
        counters = (lambda capture: _counters(place, job, partial, capture, kernel, clocks)) if tool == "ncu" else None
        report(partial, doc, status, reproduce.machine_of(host, gpus[0] if with_gpu else None),
               checkout=Checkout.here(), counters=counters)
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise
    partial.rename(final)
    return final


def check_case(name: str, experiment: str | None, case: str | None, tool: str, kernel: str | None,
               target: str | None, seconds: float,
               clocks: bool = False) -> tuple[model.Recipe, model.Experiment, model.Params, Spec]:
    """The flags checked (each refusal one sentence, before anything is built): the recipe, the case, the target."""
    if tool not in TOOLS:
        raise RecipeError(f"--tool {tool}: use nsys (a timeline) or ncu (the timeline, then the counters of its top "
                          "kernels).")
    if kernel and tool != "ncu":
        raise RecipeError("--kernel picks the kernels Nsight Compute profiles; add --tool ncu.")
    if clocks and tool != "ncu":
        raise RecipeError(CLOCKS_NEED_NCU)
    if kernel:
        ncu.check_regex(kernel)
    if not seconds or seconds <= 0:
        raise RecipeError(f"--seconds {seconds}: give the capture's time limit in seconds (default {SECONDS:g}).")
    recipe = read.load(name)
    exp, params = choose_case(recipe, experiment, case)
    spec, _ = builds.resolve_target(recipe, target)
    if exp.needs_cuda and not spec.cuda:
        raise RecipeError(f"{exp.name} needs CUDA, and target {spec.target} has none; profile it with --target of a "
                          "CUDA target.")
    return recipe, exp, params, spec


def about(recipe: model.Recipe, exp: model.Experiment, params: model.Params, spec: Spec, built: builds.Built,
          eng: Engine, *, with_gpu: bool, seconds: float, tool: str) -> About:
    """What this side knows of the case before it runs: profile.json's start (the recipe's provenance as a run
    records it). A cluster task carries it to its node and back (capture's --about)."""
    made = record.new(recipe, manifest=manifest.read(recipe.name, built.image_id, eng), image_id=built.image_id,
                      image_facts=reproduce.image_facts(recipe, built, eng), machine=Machine(None), cases=[], verdicts=[])
    lenient = recipe.requirements.cpu and not exp.needs_cuda   # a CPU experiment of a recipe that runs on CPU
    return About(format="kernellab-recipe-profile/1", experiment=exp.name, case=params,
                 command=model.substitute(exp.run, {**built.env.values, **params}), cwd=exp.cwd, target=spec.target,
                 cuda=spec.cuda, with_gpu=with_gpu, kernels_expected=with_gpu and not lenient, seconds_limit=seconds,
                 argv=list(sys.argv), tool=tool, recipe=made.recipe, sources=made.sources, patches=made.patches,
                 values=made.values, paper=vars(made.paper), image=made.image.to_dict())


def capture_argv(doc: About, stem: str) -> list[str]:
    """The job in the image (kernellab.recipes.capture) for the case `doc` describes, its report named stem."""
    return ["python", "-m", "kernellab.recipes.capture", "--cwd", doc["cwd"], "--command", doc["command"],
            "--stem", stem, "--seconds", f"{doc['seconds_limit']:g}", *(["--cuda", doc["cuda"]] if doc["cuda"] else [])]


def report(folder: Path, doc: About | Mapping[str, Any], status: Status | Mapping[str, Any],
           machine: Machine | Mapping[str, object], *, checkout: Checkout | None = None,
           counters: Callable[[nsys.Capture], Counters] | None = None, date: str | None = None) -> Profile:
    """After the job ran in the image (here, or as a cluster task): its SQLite export read back (no nsys needed
    here), checked, and folder's profile.json, timeline.png and summary.md written; the export goes. The document.
    machine (and the checkout, kept in it as run.json keeps it) is where the case ran. A cluster task's merge
    (profile_cluster.merge) hands the JSON its folder holds: inside.json's about and status, and profile.json's
    form of the machine."""
    doc, status = cast(About, doc), cast(Status, status)
    stem = Path(str(status["report"])).stem   # .nsys-rep, or .qdrep from an nsys before 2021.4
    capture = nsys.read(folder / f"{stem}.sqlite")
    if doc.get("kernels_expected") and not capture.kernels:
        raise ProfileError(f"nsys {status['version']} recorded no kernel at all while {doc['experiment']} "
                           f"{shown(doc['case'])} ran on the GPU: "
                           + nsys.lost_kernels_hint(status["version"] or "", doc["cuda"]))
    found = counters(capture) if counters else None
    ran = record.machine_json(machine, checkout) if isinstance(machine, Machine) else dict(machine)
    full: Profile = {**doc, "date": date or now(), "machine": ran,
                     "nsys": Nsys(version=status["version"], path=status["path"], trace=status["trace"],
                                  exit_code=status["exit_code"], report=status["report"], schema=capture.schema),
                     "kernels": len(capture.kernels), "ranges": len(capture.ranges), "ncu": found,
                     "top_kernels": [TopKernel(kernel=r["kernel"], launches=r["launches"], total_ns=r["total_ns"],
                                               share=r["share"]) for r in timeline.kernel_rows(capture.kernels)[:TOP]]}
    _write(folder, full, capture, *_os_side(capture))
    (folder / f"{stem}.sqlite").unlink(missing_ok=True)  # the report holds it all; `nsys export` remakes it
    return full


def _check_ncu(target: str | None, with_gpu: bool) -> None:
    if not with_gpu:
        raise ProfileError(f"Nsight Compute reads a GPU's counters, and this case runs without one (target {target} "
                           "has no CUDA, no GPU is here, or --gpu-mode none); use --tool nsys, or a CUDA target on a "
                           "GPU machine.")
    if tools.counters_restricted(tools.read_params()) and os.geteuid() != 0:
        raise ProfileError(tools.COUNTERS_REMEDY)
    _host_override("ncu")


def _host_override(name: str) -> str | None:
    """The container path of the tool KERNELLAB_NSYS (KERNELLAB_NCU) names on this machine, mounted read-only; None
    when none is named (the image's own is used, else this machine's, mounted)."""
    tool = tools.TOOLS[name]
    if not os.environ.get(tool.override, "").strip():
        return None
    exe = tools.find(name)
    if exe is None:
        raise ProfileError(f"{tool.override}={os.environ[tool.override]} is not an executable {name}; point it at "
                           f"one, or unset it.")
    return f"{tool.mount}/{exe.resolve().relative_to(tools.install_folder(exe)).as_posix()}"


def _folders(root: Path, key: str) -> tuple[Path, Path]:
    """<root>/<date>-<time>-<key>.partial and its final name, the next free one (-2, -3 after runs of one second)."""
    root.mkdir(parents=True, exist_ok=True)
    name, n = f"{time.strftime('%Y%m%d-%H%M%S')}-{key}", 1
    while True:
        final = root / (name if n == 1 else f"{name}-{n}")
        partial = final.with_name(final.name + ".partial")
        if not final.exists():
            try:
                partial.mkdir()
                return partial, final
            except FileExistsError:
                pass
        n += 1


def _inside(place: Place, job: jobs.Job, partial: Path) -> Status:
    """Run the inside job; its status, or ProfileError with its one sentence."""
    code = place.run(job)
    status_file = partial / STATUS
    if not status_file.is_file():
        log = (partial / LOG).read_text(errors="replace") if (partial / LOG).is_file() else ""
        last = [line for line in log.splitlines() if line.strip()][-1:]
        why = f"timed out after {job.timeout:g} s" if code == proc.TIMED_OUT else f"exited with code {code}"
        raise ProfileError(f"the profiling job in the recipe's image {why}{': ' + last[0] if last else ''}.")
    status: Status = json.loads(status_file.read_text())
    status_file.unlink()
    if problem := status.get("problem"):
        raise ProfileError(problem)
    return status


def _counters(place: Place, job: jobs.Job, partial: Path, capture: nsys.Capture, kernel: str | None,
              clocks: bool = False) -> Counters:
    """Nsight Compute on the named kernels (or the timeline's top TOP), one ncu run per pattern, in the image;
    `clocks`: each pattern's again at the GPU's own clocks, matched to the first run's launches (ncu.with_boost)."""
    names = [r["kernel"] for r in timeline.kernel_rows(capture.kernels)[:TOP]]
    if not kernel and not names:
        raise ProfileError("the timeline recorded no kernel for Nsight Compute to profile; name some with --kernel.")
    patterns = [kernel] if kernel else [re.escape(n) for n in names]
    argv = [*job.argv, "--tool", "ncu", *[a for p in patterns for a in ("--kernel", p)],
            *(["--clocks"] if clocks else []), *(["--ncu", x] if (x := _host_override("ncu")) else [])]
    runs = len(patterns) * (2 if clocks else 1)  # each runs the whole case: each gets the capture's limit
    timeout = job.timeout * runs if job.timeout else None
    status = _inside(place, dataclasses.replace(job, argv=tuple(argv), tools=("ncu",), timeout=timeout), partial)

    def kernels(name: str) -> list[dict[str, Any]]:
        return [ncu.summarize(r) for r in ncu.parse_raw_csv((partial / name).read_text())]

    if not clocks:
        rows = [k for f in status["csv"] for k in kernels(f)]
        return Counters(version=status["version"], patterns=patterns, kernels=rows)
    rows = [k for f, b in zip(status["csv"], status["boost_csv"]) for k in ncu.with_boost(kernels(f), kernels(b))]
    return Counters(version=status["version"], patterns=patterns, kernels=rows, clocks=True)


# --------------------------------------------------------------------------- what the capture says


def _os_side(capture: nsys.Capture) -> tuple[list[OsCall], list[nsys.Range]]:
    """From nsys's osrt trace: one row per OS runtime call name (calls above its threshold), most time first; and
    for the picture, the case's span (from nsys's OS-runtime start and finish markers) above the calls."""
    calls = [(c.name, c.start, c.end, c.thread) for c in capture.os_calls]
    marks = [start for _, start, end, _ in calls if end == start]   # nsys's own markers: no duration
    found: dict[str, list[int]] = defaultdict(list)
    spans = [nsys.Range("the case", min(marks), max(marks), None, "osrt")] if len(marks) > 1 else []
    for name, start, end, thread in calls:
        if end > start:
            found[name].append(end - start)
            spans.append(nsys.Range(name, start, end, thread, "osrt"))
    rows = [OsCall(call=n, calls=len(v), total_ns=sum(v), max_ns=max(v)) for n, v in found.items()]
    return sorted(rows, key=lambda r: -r["total_ns"]), spans


def _write(folder: Path, doc: Profile, capture: nsys.Capture, osrt: list[OsCall],
           spans: list[nsys.Range]) -> None:
    """profile.json, timeline.png (one lane: the NVTX ranges, else the case's span and its OS calls, above the
    kernels) and summary.md; an empty log of the job goes."""
    if spans:
        doc["case_seconds"] = round(spans[0].ns / 1e9, 3) if spans[0].name == "the case" else None
    (folder / "profile.json").write_text(json.dumps(doc, indent=1, default=str) + "\n")
    ranges = capture.ranges or spans
    starts = [k.start for k in capture.kernels] + [r.start for r in ranges]
    what = ("its NVTX ranges above" if capture.ranges else "the case and its OS runtime calls above" if spans
            else "no NVTX ranges")
    timeline.picture(folder / "timeline.png", [timeline.Lane(f"the whole capture: {count(len(capture.kernels), 'kernel')}, "
                     f"{what}", ranges, capture.kernels, min(starts, default=0))],
                     f"{doc['recipe']}: {doc['experiment']} {shown(doc['case'])}")
    (folder / "summary.md").write_text(markdown(doc, capture, osrt, folder))
    if (folder / LOG).is_file() and not (folder / LOG).stat().st_size:
        (folder / LOG).unlink()


def shown(params: model.Params) -> str:
    return " ".join(f"{k}={v}" for k, v in params.items()) or "(its one case)"


def markdown(doc: Profile, capture: nsys.Capture, osrt: list[OsCall], folder: Path) -> str:
    ns, image, machine = doc["nsys"], doc["image"], Machine.from_dict(doc["machine"])
    gpu = machine.gpu_name
    ended = ("stopped at the time limit" if ns["exit_code"] is None else f"the case exited with code {ns['exit_code']}"
             + (f" after {doc['case_seconds']:g} s" if doc.get("case_seconds") else ""))
    lines = [f"# Profile: {doc['recipe']}, {doc['experiment']} {shown(doc['case'])}", "",
             f"- image: `{image.get('tag')}` (`{str(image.get('id'))[:19]}`, target {doc['target']}, CUDA "
             f"{doc['cuda'] or 'none'}), {'GPU ' + gpu + ' (driver ' + str(machine.driver) + ')' if gpu else 'no GPU'}",
             f"- Nsight Systems {ns['version']} (export schema {ns['schema']}), traced: {', '.join(ns['trace'])}; CPU "
             f"sampling off; capture limited to {doc['seconds_limit']:g} s ({ended})",
             f"- report: `{ns['report']}` (open it in Nsight Systems); picture: `timeline.png`; the case's output: "
             f"`{OUTPUT}`", "", f"The case, in `{'/src' if doc['cwd'] == '.' else '/src/' + doc['cwd']}`:", "", "```sh", doc["command"], "```", "",
             "## Top kernels by GPU time", ""]
    rows = timeline.kernel_rows(capture.kernels)
    lines += timeline.kernel_table(rows) if rows else [
        "None: " + ("CUDA was not traced (a CPU case)." if "cuda" not in ns["trace"] else
                    "this CPU experiment launched no kernel.")]
    lines += ["", "## NVTX ranges", ""]
    lines += timeline.nvtx_table(timeline.nvtx_rows(capture)) if capture.ranges else [
        "None: the program marks no NVTX ranges."]
    if "osrt" in ns["trace"]:
        lines += ["", "## OS runtime calls", ""]
        lines += (["| call | calls | time | longest |", "|---|---:|---:|---:|"] +
                  [f"| `{r['call']}` | {r['calls']} | {timeline.us(r['total_ns'])} | {timeline.us(r['max_ns'])} |"
                   for r in osrt[:15]]) if osrt else ["None above nsys's threshold: the program spent its time "
                                                      "computing, not waiting on the OS."]
    if counters := doc.get("ncu"):
        lines += ["", "## Nsight Compute", "", *_ncu_table(counters)]
    output = (folder / OUTPUT).read_text(errors="replace") if (folder / OUTPUT).is_file() else ""
    lines += ["", "## The case's output (last lines)", "", "```",
              *(output.rstrip().splitlines()[-15:] or ["(no output)"]), "```"]
    return "\n".join(lines) + "\n"


def _ncu_table(counters: Counters) -> list[str]:
    """Nsight Compute's section: how it ran, the table (kernellab.nsight.report's, as `invoke profile` has it, without
    an implementation column), and with --clocks how to read its two columns."""
    clocks = bool(counters.get("clocks"))
    again = " Each kernel again at the GPU's own clocks (`--clocks`)." if clocks else ""
    lines = [f"Nsight Compute {counters['version'] or '?'}, `--set basic`, {ncu_report.SETTINGS}; kernels matching "
             f"{', '.join(f'`{p}`' for p in counters['patterns'])}.{again}", ""]
    lines += ncu_report.ncu_table([("", k) for k in counters["kernels"]], clocks=clocks)
    return lines + (["", ncu_report.CLOCKS_NOTE] if clocks else [])
