"""Import: verify a bundle, then load it into an engine or convert it, by the `--to` value.

Each importer is a plan: it checks tools, layers and disk space first (a refusal should not cost
a verification pass) and returns the step that does the work once every chunk has been verified.
IMPORTERS maps each `--to` value to its plan; None (no --to) loads into the selected engine.
"""
from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from .. import engine as engines
from .. import proc
from ..engine import Engine
from ..errors import CommandError, EngineError, TransferError
from .chunks import FdSink, Progress, decompress, verify_bundle
from .disk import disk_error, output_file, require_free
from .export import last_line, verify_files
from .manifest import Manifest, chain_ids, read_manifest

#: Engines whose `load` skips the layer files of layers it already has, so a delta bundle loads
#: (Docker 20.10, verified). Podman 4.3 refuses such an archive: "Some layer tarfiles are missing".
DELTA_LOADERS = ("docker",)
#: How enroot names each engine in its import URIs.
ENROOT_SCHEMES = {"docker": "dockerd", "podman": "podman"}


@dataclass
class ImportResult:
    image_id: str
    tags: list[str]
    output: Path | None  # the .sif or .sqsh file when converting
    tar_bytes: int
    seconds: float


@dataclass(frozen=True)
class Job:
    bundle: Path
    manifest: Manifest
    output: Path | str | None
    engine: Engine | None  # the caller's engine= (None: the selected one)


Finish = Callable[["Progress | None"], "Path | None"]
Plan = Callable[[Job], Finish]


@dataclass(frozen=True)
class Importer:
    plan: Plan
    label: str  # how the --to value reads in a list of choices


IMPORTERS: dict[str | None, Importer] = {}


def importer(to: str | None, label: str) -> Callable[[Plan], Plan]:
    """Register a plan for `--to <to>`."""
    def register(plan: Plan) -> Plan:
        IMPORTERS[to] = Importer(plan, label)
        return plan
    return register


def choices() -> str:
    return ", ".join(i.label for to, i in IMPORTERS.items() if to is not None)


def import_bundle(bundle: Path | str, *, to: str | None = None, output: Path | str | None = None,
                  progress: Progress | None = None, engine: Engine | None = None) -> ImportResult:
    """Verify a bundle, then load it into an engine (to=None: the selected one) or convert it (sif, sqsh)."""
    start = time.monotonic()
    bundle = Path(bundle)
    if to not in IMPORTERS:
        raise TransferError(f"--to {to} is not known; use one of {choices()}, "
                            "or leave it out to load into the selected engine.")
    manifest = read_manifest(bundle)
    finish = IMPORTERS[to].plan(Job(bundle, manifest, output, engine))
    verify_bundle(bundle, progress)
    bad = verify_files(bundle, [c.name for c in manifest.chunks])
    if bad:
        raise TransferError(f"{len(bad)} file(s) that travel with the image in {bundle} are missing or damaged: "
                            f"{', '.join(bad[:6])}; copy them again from the sender; nothing was loaded.")
    out = finish(progress)
    return ImportResult(manifest.image.id, manifest.image.tags, out, manifest.stream.tar_bytes,
                        time.monotonic() - start)


# ---------------------------------------------------------------- into an engine


def _engine_plan(job: Job, eng: Engine) -> Finish:
    try:
        eng.require()
    except EngineError as e:
        other = ("without a Docker daemon, import with --to sif (Apptainer), or --to sqsh (enroot) through "
                 "rootless podman" if eng.name == "docker" else "without an engine, import with --to sif (Apptainer)")
        raise EngineError(f"{str(e).rstrip('.')}; {other}.") from None
    _check_layers(job.manifest, eng)

    def finish(progress: Progress | None) -> None:
        load_into(eng, job.bundle, job.manifest, progress)

    return finish


@importer(None, "")
def _selected(job: Job) -> Finish:
    return _engine_plan(job, engines.resolve_engine(job.engine))


@importer("docker", "docker")
def _docker(job: Job) -> Finish:
    return _engine_plan(job, engines.by_name("docker"))


@importer("podman", "podman")
def _podman(job: Job) -> Finish:
    return _engine_plan(job, engines.by_name("podman"))


def _check_layers(manifest: Manifest, eng: Engine) -> None:
    """A delta bundle loads only where the engine has the layers it left out, and loads partial archives."""
    needed = [layer for layer in manifest.layers if not layer.shipped]
    if not needed:
        return
    if eng.name not in DELTA_LOADERS:
        raise TransferError(f"This is a delta bundle and {eng.name} loads only complete archives; import the "
                            "full bundle of this image, or load this one into Docker; nothing was loaded.")
    have: set[str] = set()
    for image in eng.inspect_many(eng.image_ids()):
        have.update(chain_ids((image.get("RootFS") or {}).get("Layers") or []))
    missing = [layer for layer in needed if layer.chain_id not in have]
    if missing:
        delta = manifest.delta
        since = (", ".join(delta.since_tags) or delta.since) if delta else "its base image"
        raise TransferError(f"This delta bundle leaves out {len(missing)} layer(s) this engine lacks "
                            f"(first: {missing[0].diff_id[:19]}); import the bundle of {since} first, "
                            "or ask the sender for a full bundle; nothing was loaded.")


def load_into(eng: Engine, bundle: Path, manifest: Manifest, progress: Progress | None) -> None:
    """Stream the decompressed archive into the engine's load; check the image ID; set the tags."""
    image = manifest.image
    try:
        with eng.load() as pipe:
            try:
                decompress(bundle, manifest, FdSink(pipe.stream.fileno()), progress)
            except BrokenPipeError:
                pass  # the loader stopped reading; its exit code and message follow when it is waited on
    except CommandError as e:
        raise TransferError(f"`{eng.name} load` failed ({last_line(e)}); nothing was loaded or tagged; free space "
                            f"in the engine's storage (`{eng.name} info`) and rerun.") from None
    loaded = eng.inspect(image.id)
    if loaded is None or loaded.get("Id") != image.id:
        raise TransferError(f"`{eng.name} load` finished but the engine has no image {image.id[:19]}; "
                            "the bundle does not hold what its manifest says, so export it again.")
    for tag in image.tags:
        eng.tag(image.id, tag)


# ---------------------------------------------------------------- conversions


def _require_full(manifest: Manifest, what: str) -> None:
    if not manifest.complete:
        raise TransferError(f"A delta bundle cannot become {what}: it lacks its base layers; "
                            "convert the full bundle, or load this one into the Docker engine that has them.")


@importer("sif", "sif (Apptainer)")
def _sif(job: Job) -> Finish:
    _require_full(job.manifest, "a SIF file")
    tool = proc.which("apptainer") or proc.which("singularity")
    if not tool:
        raise TransferError("Neither apptainer nor singularity is installed here; install Apptainer "
                            "(apptainer.org, or `module load apptainer` on a cluster) and rerun.")
    out = output_file(job.bundle, job.output, "sif")
    # the unpacked archive, then the SIF beside it
    require_free(out.parent, job.manifest.stream.tar_bytes * 2, "Converting")

    def finish(progress: Progress | None) -> Path:
        tar = out.parent / f".{out.name}.tar.partial-{os.getpid()}"
        part = out.parent / f".{out.name}.partial-{os.getpid()}.sif"
        try:
            with open(tar, "wb") as f:
                decompress(job.bundle, job.manifest, f, progress)
            proc.run([tool, "build", str(part), f"docker-archive:{tar}"], stream=True)
            os.rename(part, out)
        except OSError as e:
            raise disk_error(e, out.parent, "the conversion") from None
        finally:
            tar.unlink(missing_ok=True)
            part.unlink(missing_ok=True)
        return out

    return finish


@importer("sqsh", "sqsh (enroot)")
def _sqsh(job: Job) -> Finish:
    if not proc.which("enroot"):
        raise TransferError("enroot is not installed here; install it (github.com/NVIDIA/enroot, or "
                            "`module load enroot` on a cluster) and rerun.")
    out = output_file(job.bundle, job.output, "sqsh")
    image = job.manifest.image
    ref = image.tags[0] if image.tags else image.id.split(":")[-1]
    # enroot reads images only through an engine: the selected one (Docker, else rootless Podman).
    eng = engines.resolve_engine(job.engine)
    if not eng.answers():
        raise TransferError(f"enroot imports through Docker or Podman and none answers here: {eng.problem()}")
    _check_layers(job.manifest, eng)

    def finish(progress: Progress | None) -> Path:
        load_into(eng, job.bundle, job.manifest, progress)
        part = out.parent / f".{out.name}.partial-{os.getpid()}"
        try:
            proc.run(["enroot", "import", "-o", str(part), f"{ENROOT_SCHEMES[eng.name]}://{ref}"], stream=True)
            os.rename(part, out)
        except OSError as e:
            raise disk_error(e, out.parent, "the conversion") from None
        finally:
            part.unlink(missing_ok=True)
        return out

    return finish
