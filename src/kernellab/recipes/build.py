"""A recipe's image: the target's image + sources + patches + each build step as its own cached layer.

Each step is a stage (`step-1`, `step-2`, ...) of one Dockerfile, so BuildKit caches every step: a failed
build resumes at the failed step, and `invoke recipe shell NAME --step N` builds the stage before step N.
The image is tagged only when every step passed, and labelled with the recipe's hash, the sources' commits
and the patches' hashes; its manifest inside it (kernellab.recipes.manifest, its sha256 a label) says what it
was made of.
An image whose label says it was built from exactly this recipe on exactly this base is not rebuilt at all.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import re
import shlex
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from .. import count, proc, shown
from ..engine import Engine, Image, resolve_engine
from ..errors import BuildError, CommandError, RecipeError, ResolveError
from ..image import builder, network
from ..image.spec import Spec
from ..image.target_table import parse_target
from ..image.targets import Matrix, load
from . import checks, index, manifest, pins, trees, values
from .manifest import Verified
from .model import Recipe, substitute
from .values import Values

REPO = "kernellab-recipe"
#: Printed by every step before its command: the last one in a failed build's log is the failed step.
MARKER = "kernellab-step"
#: Part of every recipe image's hash: raise it when dockerfile() makes a different image from the same recipe.
FORMAT = 5  # 4: the manifest at /etc/kernellab/recipe-manifest.json; 5: pip's --report of the pip layer
_MARK = re.compile(rf"^(?:#(\d+) [\d.]+ )?{MARKER} (\d+) ")


@dataclass(frozen=True)
class Environment:
    """Where a recipe builds: the resolved target, its image, and the values its commands use."""

    spec: Spec
    base: str                  # the target's image reference
    base_id: str
    values: Values
    build_hash: str            # what the recipe's image is a function of

    @property
    def tag(self) -> str:
        return f"{REPO}:{self.spec.target or 'inline'}-{self.build_hash[:12]}"


@dataclass(frozen=True)
class Built:
    recipe: str
    image: Image               # inspected once: its ID and labels, handed to every container of the run
    tags: tuple[str, ...]
    env: Environment
    cached: bool               # True: the image already existed; nothing was built
    seconds: float
    log: Path | None = None

    @property
    def image_id(self) -> str:
        return self.image.id


def resolve_target(recipe: Recipe, target: str | None = None, matrix: Matrix | None = None) -> tuple[Spec, Matrix]:
    """The recipe's environment as a frozen Spec (--target overrides), checked against the recipe's archs."""
    matrix = matrix or load()
    name = target or recipe.target
    if name is None:  # an inline target table: validated like one in docker/targets.toml
        name = f"recipe-{recipe.name}"
        matrix = dataclasses.replace(matrix, targets={**matrix.targets, name: parse_target(name, recipe.target_table)})
    try:
        spec = builder.resolve_request(target=name, matrix=matrix)
    except ResolveError as e:
        if target:  # --target's own: the task's flag, not the recipe's
            raise
        raise RecipeError(f"{shown(recipe.file)}: environment.target: {e}") from None
    checks.check_target(recipe, spec)
    return spec, matrix


def environment(recipe: Recipe, *, target: str | None = None, engine: Engine | None = None,
                out: IO[str] = sys.stdout) -> Environment:
    """Resolve the target, make sure its image exists (building it if not), and compute the build's values."""
    eng = resolve_engine(engine).require()
    spec, matrix = resolve_target(recipe, target)
    base = f"kernellab:{spec.target}"
    base_id = target_image(spec, eng)
    if base_id is None:
        # A committed lock is followed exactly: a recipe build never rewrites a tracked file (a lock that no longer
        # resolves is one sentence naming what moved, with the remedies); without one, the build resolves and writes it.
        locked = builder.lock_path(spec, builder.LOCK_DIR)
        committed = locked.is_file()
        out.write(f"{base} is not built for this spec yet; building it first"
                  f"{' from its lock' if committed else ''}\n")
        try:
            builder.build(spec, matrix=matrix, lock="strict" if committed else "prefer",
                          ca_certs=network.ca_certificates(), out=out, engine=eng)
        except BuildError as e:
            if not committed:
                raise
            raise BuildError(f"{e} The recipe build follows {shown(locked)} and "
                             f"never rewrites it: `invoke build-image --target {spec.target} --update` resolves the "
                             f"target afresh (commit the new lock), or point KERNELLAB_DEBIAN_MIRROR at a snapshot "
                             f"that still has the locked packages.") from None
        base_id = eng.image_id(base)
    vals = values.values(spec, values.probe(base_id, eng))
    blob = json.dumps({"format": FORMAT, "recipe": recipe.digest(), "base": base_id, "values": vals}, sort_keys=True).encode()
    return Environment(spec, base, base_id, vals, hashlib.sha256(blob).hexdigest())


def target_image(spec: Spec, eng: Engine) -> str | None:
    """The ID of `kernellab:<target>` when it is built for exactly this spec, else None."""
    found = eng.find_image(f"kernellab:{spec.target}")
    return found.id if found and found.labels.get("kernellab.spec-sha256") == spec.digest else None


def find_built(recipe: Recipe, env: Environment, engine: Engine | None = None) -> Image | None:
    """The image built from exactly this recipe on exactly this base, or None."""
    found = resolve_engine(engine).find_image(env.tag)
    return found if found and found.labels.get("kernellab.recipe-sha256") == env.build_hash else None


def build(recipe: Recipe, *, target: str | None = None, upto: int | None = None, wheelhouse: Path | None = None,
          no_cache: bool = False, locking: pins.Mode = "prefer", engine: Engine | None = None,
          out: IO[str] = sys.stdout) -> Built:
    """Build the recipe's image (or, with upto=N, the state before step N); nothing changed: nothing built.

    locking: how the recipe's lock (recipes/NAME/locks/TARGET.json) is followed; see kernellab.recipes.pins."""
    start = time.monotonic()
    eng = resolve_engine(engine).require()
    env = environment(recipe, target=target, engine=eng, out=out)
    locked_name = env.spec.target or f"recipe-{recipe.name}"
    pinned = pins.chosen(recipe, locked_name, locking, out)
    if upto is None and not no_cache and locking != "update":
        found = find_built(recipe, env, eng)
        if found and (locking == "prefer" or pins.fits(recipe, locked_name, pip_added(found.id, eng))):
            # The name tag follows the image this recipe is now (after a revert, an older one): never another.
            eng.tag(found.id, f"{REPO}:{recipe.name}")
            return Built(recipe.name, found, (env.tag, f"{REPO}:{recipe.name}"), env, True, time.monotonic() - start)
    # The pip layer needs the index unless a wheelhouse stands for it: say at once when the index does not answer.
    pip_config = network.host_pip_config() if recipe.pip_all and wheelhouse is None else None
    if pip_config is not None:
        pip_config = index.offline_notice(recipe, pip_config, dated=bool(as_of(recipe, env)) and not pinned, out=out)
    # RAM and disk only: a build needs no GPU (a run checks its GPU).
    checks.check_host(recipe, gpus=(), disk=Path(eng.info().root or "/"))
    home = values.context_dir(recipe.name)
    ctx = home / "context"
    provenance = _context(recipe, env, ctx, out)
    manifest_sha = manifest.write(ctx, _manifest(recipe, env, provenance))
    # BuildKit (Docker 20.10) cannot build FROM a bare image ID: a tag named after the ID stands for it.
    eng.tag(env.base_id, base_ref(env))
    stage = None if upto is None else ("sources" if upto <= 1 else f"step-{upto - 1}")
    tags = (env.tag, f"{REPO}:{recipe.name}") if upto is None else (f"{REPO}:{recipe.name}-before-step-{upto}",)
    logs = home / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    log = logs / f"build-{time.strftime('%Y%m%d-%H%M%S')}.log"

    def run(pinned: list[str] | None, fresh: str | None, target: str | None, tags: tuple[str, ...], what: str) -> str:
        (ctx / "Dockerfile").write_text(dockerfile(recipe, env, provenance, manifest_sha, pinned, fresh))
        return _buildkit(recipe, env, eng, ctx, log, wheelhouse=wheelhouse, pip_config=pip_config,
                         dated=bool(as_of(recipe, env)) and not pinned, tags=tags, target=target, no_cache=no_cache,
                         what=what, out=out)

    if recipe.pip_all and pinned is None:
        # Unlocked: resolve the pip packages in a stage of their own and lock them first, so that the pip layer every
        # build runs is the pinned one: writing the lock (or --update) reruns no step whose packages are the same.
        # --update resolves afresh: a pip line BuildKit has not seen (otherwise it serves the old resolution).
        fresh = time.strftime("%Y%m%dT%H%M%S") if locking == "update" else None
        with eng.staging() as staging:  # named while it is read: a `docker image prune` deletes an untagged image
            added = pip_added(run(None, fresh, "sources", (staging,), "its pip packages, to lock them"), eng)
        written = pins.write(recipe, locked_name, env.spec.digest, added)
        if written:
            out.write(f"locked the recipe's pip packages in {written} (commit it: later builds install exactly these)\n")
        pinned = [f"{name}=={version}" for name, version in sorted(added.items())]
    image_id = run(pinned, None, stage, tags, f"the state before step {upto}" if upto else count(len(recipe.steps), "step"))
    if recipe.packages:  # the system's wheels: the ones the lock names, else locked now
        got = wheels_in(recipe, image_id, eng)
        pins.check_wheels(recipe, locked_name, got)
        written = pins.write(recipe, locked_name, env.spec.digest, pip_added(image_id, eng), got)
        if written:
            out.write(f"locked the wheels of {', '.join(p.requirement for p in recipe.packages)} in {written}\n")
    return Built(recipe.name, eng.image(image_id), tags, env, False, time.monotonic() - start, log)


def _buildkit(recipe: Recipe, env: Environment, eng: Engine, ctx: Path, log: Path, *, wheelhouse: Path | None,
              pip_config: network.PipConfig | None, dated: bool, tags: tuple[str, ...], target: str | None, no_cache: bool, what: str, out: IO[str]) -> str:
    """One build of the context's Dockerfile (up to stage `target`), its output shown and appended to log."""
    proxy_args, proxy_env = network.proxy_build_args()
    with tempfile.TemporaryDirectory(prefix="kl-recipe-") as tmp, \
            network.build_pip_conf(pip_config, wheelhouse, dated=dated) as pipconf:
        iid = Path(tmp) / "iid"
        argv, build_env = eng.build_argv(ctx, iidfile=iid, tags=tags, secrets={"pipconf": pipconf},
                                         build_args=proxy_args, no_cache=no_cache, target=target)
        out.write(f"building recipe {recipe.name} ({what}) FROM {env.base} with {eng.name}; log: {log}\n")
        with open(log, "a") as f:
            steps = builder.BuildSteps(_Tee(out, f))  # type: ignore[arg-type]  # write, flush and isatty are all it uses
            try:
                proc.run(argv, stream=True, out=steps, env={**build_env, **proxy_env})
            except CommandError as e:
                raise _failure(recipe, log, e) from None
            finally:
                steps.close()
        return builder.read_iid(iid)


class _Tee:
    def __init__(self, *outs: Any):
        self.outs = outs

    def write(self, text: str) -> int:
        for o in self.outs:
            o.write(text)
        return len(text)

    def flush(self) -> None:
        for o in self.outs:
            o.flush()

    def isatty(self) -> bool:
        return bool(getattr(self.outs[0], "isatty", lambda: False)())


def _context(recipe: Recipe, env: Environment, ctx: Path, out: IO[str]) -> dict[str, Verified]:
    """The build context: the sources made fresh from their verified commits and patched (on every build: no
    earlier tree is trusted), the recipe's folder."""
    provenance = trees.prepare(recipe, ctx / "src", out)
    if (ctx / "recipe").exists():
        shutil.rmtree(ctx / "recipe")
    shutil.copytree(recipe.folder, ctx / "recipe", ignore=shutil.ignore_patterns("__pycache__", pins.FOLDER))
    (ctx / ".dockerignore").write_text("**/.git\n")
    return dict(provenance)


def _manifest(recipe: Recipe, env: Environment, provenance: dict[str, Verified]) -> manifest.Manifest:
    return manifest.Manifest(
        recipe=recipe.name, recipe_sha256=env.build_hash, recipe_files_sha256=recipe.digest(),
        target=env.spec.target, base_image=env.base_id, spec_sha256=env.spec.digest, sources=provenance,
        patches=[{"file": p.file.name, "sha256": p.sha256, "source": p.source, "reason": p.reason}
                 for p in recipe.patches],  # in the order they were applied
        values=env.values, pip=list(recipe.pip_all), steps=[dataclasses.asdict(s) for s in recipe.steps])


def _run(script: str) -> str:
    """A RUN line in JSON form: any script text (newlines, quotes) survives, and is the cache key."""
    return "RUN " + json.dumps(["bash", "-eo", "pipefail", "-c", script])


def base_ref(env: Environment) -> str:
    return f"{REPO}-base:{env.base_id.removeprefix('sha256:')[:16]}"


def as_of(recipe: Recipe, env: Environment) -> str | None:
    """The day the recipe's pip packages resolve as of: the recipe's own, else its target's."""
    return recipe.as_of or env.spec.as_of


def pip_added(image: str, eng: Engine) -> dict[str, str]:
    """What the recipe's pip layer added to the target's packages (read from the image)."""
    r = eng.read_file(image, pins.ADDED)
    return pins.parse_added(r.stdout) if r.ok else {}


def wheels_in(recipe: Recipe, image: str, eng: Engine) -> dict[str, pins.Wheel]:
    """The recipe's packages as its image's pip layer installed them: version and wheel sha256 (pip's report)."""
    r = eng.read_file(image, pins.REPORT)
    return pins.wheels(r.stdout, recipe) if r.ok else {}


def dockerfile(recipe: Recipe, env: Environment, provenance: dict[str, Verified], manifest_sha: str,
               pinned: list[str] | None = None, fresh: str | None = None) -> str:
    """pinned: the recipe's pins (`name==version`), installed instead of the recipe's pip list;
    fresh: a stamp that makes the pip line new to the build cache (resolve again)."""
    lines = [f"FROM {base_ref(env)} AS sources", "USER root", "WORKDIR /src", "COPY src/ /src/"]
    freeze = "(python3 -m pip freeze 2>/dev/null || true) | LC_ALL=C sort"
    lines.append(_run(f"mkdir -p /etc/kernellab && {freeze} > /etc/kernellab/target-pip-freeze.txt"))
    if recipe.pip_all:
        # Not pinned, its packages resolve as of the recipe's day (or its target's).
        date = None if pinned else as_of(recipe, env)
        dated = f"python3 -m pip install {load().pip_as_of} && " if date else ""
        lines.append("RUN --mount=type=cache,id=kl-pip,target=/root/.cache/pip "
                     "--mount=type=secret,id=pipconf,target=/etc/pip.conf "
                     + (f"KERNELLAB_RESOLVED={fresh} " if fresh else "") + dated
                     + f"python3 -m pip install --report {pins.REPORT} "
                     + (f"--uploaded-prior-to {date}T00:00:00Z " if date else "")
                     + " ".join(shlex.quote(p) for p in pinned or recipe.pip_all))
    lines.append(_run(f"{freeze} > /etc/kernellab/recipe-pip-freeze.txt && LC_ALL=C comm -13 "
                      f"/etc/kernellab/target-pip-freeze.txt /etc/kernellab/recipe-pip-freeze.txt > {pins.ADDED}"))
    previous = "sources"
    for i, step in enumerate(recipe.steps, 1):
        # A step's line holds its number, not the count of steps: appending a step reruns none before it.
        script = f"echo {MARKER} {i} {shlex.quote(step.name)}\ncd /src/{step.cwd}\n{substitute(step.run, env.values)}"
        lines += ["", f"FROM {previous} AS step-{i}", _run(script)]
        previous = f"step-{i}"
    labels = {
        "kernellab.recipe": recipe.name, "kernellab.recipe-sha256": env.build_hash,
        "kernellab.recipe-manifest-sha256": manifest_sha, "kernellab.recipe-base": env.base_id,
        "kernellab.recipe-sources": json.dumps({k: {"commit": v["commit"], "submodules": v["submodules"]}
                                                for k, v in provenance.items()}, sort_keys=True),
        "kernellab.recipe-patches": json.dumps({p.file.name: p.sha256 for p in recipe.patches}, sort_keys=True),
        "org.opencontainers.image.title": recipe.paper.title, "org.opencontainers.image.url": recipe.paper.link,
    }
    lines += ["", f"FROM {previous} AS final", "COPY recipe/ /recipe/", f"COPY {manifest.IN_CONTEXT} {manifest.IN_IMAGE}",
              "WORKDIR /src", "LABEL " + " \\\n      ".join(f"{k}={json.dumps(v)}" for k, v in labels.items())]
    return "\n".join(lines) + "\n"


def _failure(recipe: Recipe, log: Path, e: CommandError) -> BuildError:
    """The failed step named, with its last lines and the full log's path."""
    text = log.read_text(errors="replace").splitlines()
    vertex, step = None, None
    for line in text:
        m = _MARK.match(line)
        if m:
            vertex, step = m.group(1), int(m.group(2))
    if step is None:
        return BuildError(f"building recipe {recipe.name} failed before its steps (sources, pip); full log: {log}. "
                          f"Last lines:\n{e.tail.rstrip()}")
    own = [line for line in text if vertex and line.startswith(f"#{vertex} ")] or text
    tail = "\n".join(re.sub(r"^#\d+ [\d.]+ ", "", line) for line in own[-15:])
    name = recipe.steps[step - 1].name
    return BuildError(f"recipe {recipe.name}: step {step} ({name}) failed; the steps before it are cached, so "
                      f"`invoke recipe build {recipe.name}` resumes there, and `invoke recipe shell {recipe.name} "
                      f"--step {step}` opens a shell in the state before it. Full log: {log}. Last lines:\n{tail}")


def verified_image(recipe: Recipe, image: Image) -> dict[str, str]:
    """The labels of a recipe image, refusing one built from another recipe."""
    labels = image.labels
    if labels.get("kernellab.recipe") != recipe.name:
        raise RecipeError(f"{image.ref} is not an image of recipe {recipe.name}; build it with "
                          f"`invoke recipe build {recipe.name}`.")
    return labels
