"""`invoke doctor`: an ordered list of checks, each a Finding with severity, message and remedy.

Checks run in order and later ones may use what earlier ones found (a Context: each field has one writer).
The JSON form doubles as a machine fingerprint for `invoke export-image --check-target`.
"""
from __future__ import annotations

import importlib
import os
import shutil
from dataclasses import asdict, dataclass, field
from typing import Any, Callable

from . import __version__, engine, gpu
from .engine import EngineInfo
from .errors import KernellabError
from .image import builder, kinds, network
from .image.compat import FAIL, INFO, OK, WARN, Finding, arch_finding, driver_finding
from .image.spec import Spec
from .image.targets import load
from .nsight import tools


@dataclass
class Context:
    """What the checks found, in order: each field is written by one check (or run) and read by later ones."""

    target: str | None = None                 # run
    spec: Spec | None = None                  # run
    spec_error: str | None = None             # run
    mvc_driver: str | None = None             # run
    engines: list[str] = field(default_factory=list)           # engines
    engine: str | None = None                 # engine
    engine_info: EngineInfo | None = None     # engine
    docker: dict[str, Any] | None = None      # engine (the fingerprint's key since its first version)
    gpus: list[gpu.HostGpu] = field(default_factory=list)      # gpus
    gpu_modes: list[str] = field(default_factory=list)         # gpu in containers


Check = Callable[[Context], Finding]
CHECKS: list[tuple[str, Check]] = []


def check(name: str) -> Callable[[Check], Check]:
    def register(fn: Check) -> Check:
        CHECKS.append((name, fn))
        return fn
    return register


@check("engines")
def _engines(ctx: Context) -> Finding:
    found = [e.name for e in engine.answering()]
    ctx.engines = found
    if not found:
        return Finding("engines", FAIL, "no container engine answers (docker, podman)",
                       "run `make engine` (as root) for Docker, or install podman + uidmap for rootless Podman")
    return Finding("engines", OK, f"answering: {', '.join(found)}")


@check("engine")
def _engine(ctx: Context) -> Finding:
    eng = engine.current()
    ctx.engine = eng.name
    try:
        info = eng.require().info()
    except KernellabError as e:
        return Finding("engine", FAIL, str(e).split(";")[0], str(e).split(";", 1)[-1].strip())
    ctx.engine_info = info
    # "docker" is the fingerprint's key since its first version (export-image --check-target reads it).
    ctx.docker = {"engine": info.name, "version": info.version, "root": info.root, "rootless": info.rootless,
                     "runtimes": list(info.runtimes)}
    mode = "rootless " if info.rootless else ""
    return Finding("engine", OK, f"using {mode}{info.name} {info.version} (--engine or KERNELLAB_ENGINE to choose)")


@check("builds")
def _buildkit(ctx: Context) -> Finding:
    eng = engine.current()
    try:
        cli = eng.builder()
    except KernellabError as e:
        return Finding("builds", FAIL, str(e).split(";")[0], str(e).split(";", 1)[-1].strip())
    return Finding("builds", OK, f"{eng.name} builds through `{' '.join(cli[:2])}`")


@check("disk")
def _disk(ctx: Context) -> Finding:
    info = ctx.engine_info
    if info is None or not info.root:
        return Finding("disk", INFO, "no engine answered: its data root is unknown")
    root = info.root
    probe = root if os.path.exists(root) else "/"
    free_gb = shutil.disk_usage(probe).free / 1e9
    msg = f"{free_gb:.0f} GB free under {root}"
    if free_gb < 5:
        return Finding("disk", FAIL, msg, "free space: `docker system prune` (or `podman system prune`), or move the data root")
    if free_gb < 30:
        return Finding("disk", WARN, msg + " (a CUDA image needs 10-20 GB)", "free space before building CUDA images")
    return Finding("disk", OK, msg)


@check("gpus")
def _gpus(ctx: Context) -> Finding:
    gpus = gpu.host_gpus()
    ctx.gpus = gpus
    if not gpus:
        return Finding("gpus", INFO, "no NVIDIA GPU found (no nvidia-smi or no device); the cpu target fits this machine")
    desc = "; ".join(f"{g.index}: {g.name} (cc {g.compute_capability}, {g.memory_mib} MiB)" for g in gpus)
    message = f"{len(gpus)} GPU(s), driver {gpus[0].driver}: {desc}"
    source = gpu.selection_source()
    try:
        chosen = gpu.selected_gpus(gpus=gpus)
    except KernellabError as e:
        return Finding("gpus", WARN, message, f"runs here will stop: {e}")
    if source is not None and chosen is not None:
        message += f"; runs use {'GPU ' + ', '.join(chosen) if chosen else 'no GPU'} ({source[0]})"
    return Finding("gpus", OK, message)


@check("driver")
def _driver(ctx: Context) -> Finding:
    spec: Spec | None = ctx.spec
    gpus = ctx.gpus
    if not gpus or spec is None or not spec.cuda:
        return Finding("driver", INFO, "no GPU driver or no CUDA in the target: nothing to compare")
    return driver_finding(gpus[0].driver, spec.cuda, spec.min_driver, ctx.mvc_driver)


@check("arch coverage")
def _archs(ctx: Context) -> Finding:
    spec: Spec | None = ctx.spec
    gpus = ctx.gpus
    if not gpus or spec is None:
        return Finding("arch coverage", INFO, "no GPU or no target: nothing to compare")
    return arch_finding([g.compute_capability for g in gpus], spec.arch_list, spec.kind == "cpu")


@check("gpu in containers")
def _modes(ctx: Context) -> Finding:
    if not ctx.gpus:
        return Finding("gpu in containers", INFO, "no GPU to hand to containers")
    modes = gpu.available_modes(ctx.engine_info, engine.current().gpu_modes)
    ctx.gpu_modes = modes
    if not modes:
        return Finding("gpu in containers", FAIL, f"no way to give {ctx.engine or 'engine'} containers the GPU: no NVIDIA runtime, no CDI spec, "
                       "and no /dev/nvidia* nodes with driver libraries",
                       "install the NVIDIA Container Toolkit, or make /dev/nvidia* and the driver libraries visible")
    detail = {"nvidia": "NVIDIA runtime (--gpus)", "cdi": "CDI (--device nvidia.com/gpu=all)",
              "devices": "device nodes + driver libraries (devices)"}
    return Finding("gpu in containers", OK, f"mode {modes[0]}: {detail[modes[0]]}; available: {', '.join(modes)}")


def _tool_check(tool: tools.Tool) -> Check:
    """A doctor line for one of NVIDIA's tools (kernellab.nsight.tools.TOOLS): its module's readiness here."""
    def run(ctx: Context) -> Finding:
        r = importlib.import_module(tool.module).readiness(tools.find(tool.name), bool(ctx.gpus))
        return Finding(tool.doctor, r.severity, r.message, r.remedy)
    return run


for _tool in tools.TOOLS.values():
    if _tool.doctor:
        check(_tool.doctor)(_tool_check(_tool))


@check("network")
def _network(ctx: Context) -> Finding:
    proxies = sorted({v.upper() for v in os.environ if v.upper() in network.PROXY_VARS})
    certs = network.ca_certificates()
    pip = network.host_pip_config()
    parts = [f"proxy variables: {', '.join(proxies) or 'none'}", f"extra CA certificates: {len(certs)}"]
    if pip.values:
        parts.append("pip config: " + ", ".join(sorted(pip.values)))
    return Finding("network", INFO, "; ".join(parts) + " (all passed to builds)")


@check("base image")
def _base(ctx: Context) -> Finding:
    spec: Spec | None = ctx.spec
    if spec is None:
        return Finding("base image", INFO, f"no target resolved: {ctx.spec_error or 'none given'}")
    if ctx.engine_info is None:
        return Finding("base image", WARN, f"cannot check {spec.base} without an engine")
    status = kinds.get(spec.kind).base_status(spec, engine.current())  # the kind knows how its base is made
    return Finding("base image", status.severity, status.message, status.remedy)


def run(target: str | None = None) -> tuple[list[Finding], Context]:
    """Run every check in order for target (default: this machine's default target)."""
    ctx = Context()
    try:
        name = target or builder.default_target()
        ctx.target = name
        ctx.spec = builder.resolve_request(target=name)
        cuda = load().cuda.get(ctx.spec.cuda or "")
        ctx.mvc_driver = cuda.mvc_driver if cuda else None
    except KernellabError as e:
        ctx.spec_error = str(e)
    findings = [fn(ctx) for _, fn in CHECKS]
    return findings, ctx


def fingerprint(findings: list[Finding], ctx: Context) -> dict[str, Any]:
    gpus = ctx.gpus
    return {
        "kernellab": __version__,
        "target": ctx.target,
        "driver": gpus[0].driver if gpus else None,
        "gpus": [g.to_dict() for g in gpus],
        "gpu_modes": ctx.gpu_modes,
        "docker": ctx.docker,
        "checks": [asdict(f) for f in findings],
    }


def render_text(findings: list[Finding]) -> str:
    mark = {OK: "ok  ", INFO: "info", WARN: "WARN", FAIL: "FAIL"}
    lines = []
    for f in findings:
        lines.append(f"[{mark[f.severity]}] {f.name:<18} {f.message}")
        if f.remedy and f.severity in (WARN, FAIL):
            lines.append(f"       {'':<18} -> {f.remedy}")
    return "\n".join(lines)
