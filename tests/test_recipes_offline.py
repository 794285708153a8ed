"""A recipe build on a machine whose pip index does not answer (issue 39): one sentence, at once, saying so and how to
install offline (--wheelhouse, which `invoke bench --against` and `invoke profile --against` pass to the build), instead
of a minute of pip's retries. The unreachable index is a closed port on the loopback (127.0.0.1:9): no network."""
from __future__ import annotations

import http.server
import io
import threading
import time
from pathlib import Path

import pytest
from invoke import Exit

from kernellab import engine, jobs
from kernellab.errors import BuildError
from kernellab.image import network
from kernellab.recipes import build, index, read
from kernellab.recipes.model import Recipe
from places_fixtures import RecordingPlace, context
from recipe_fixtures import make_mirror, make_wheel, mirror_env, with_layernorm_baseline, write_recipe

CLOSED = "http://127.0.0.1:9/simple"   # the discard port: nothing listens on the loopback there
COMMITS = {"paper": "a" * 40, "helper": "b" * 40}
SENTENCE = "does not answer from this machine"


@pytest.fixture
def only_env_config(monkeypatch: pytest.MonkeyPatch) -> None:
    """pip's configuration is the PIP_* variables the test sets: no files, no proxy between here and the loopback."""
    monkeypatch.setenv("PIP_CONFIG_FILE", "/dev/null")
    for name in ("PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "PIP_FIND_LINKS", "PIP_RETRIES", "PIP_TIMEOUT"):
        monkeypatch.delenv(name, raising=False)
    for name in network.PROXY_VARS:
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)


def _recipe(tmp_path: Path) -> Recipe:
    return read.load(str(write_recipe(tmp_path / "fastop", COMMITS, pip=("klpin>=1.0",))))


def test_an_index_that_does_not_answer_is_one_sentence_at_once(tmp_path, monkeypatch, only_env_config):
    monkeypatch.setenv("PIP_INDEX_URL", "http://user:s3cret@127.0.0.1:9/simple")
    monkeypatch.setenv("PIP_FIND_LINKS", "https://wheels.example.org/")
    out = io.StringIO()
    start = time.monotonic()
    config = index.offline_notice(_recipe(tmp_path), network.host_pip_config(), dated=False, out=out)
    assert time.monotonic() - start < 15, "well under pip's minute of retries"
    said = out.getvalue()
    assert said.count("\n") == 1 and said.startswith(f"pip's index {CLOSED} {SENTENCE} (")
    assert "tries it once instead of retrying for a minute, then looks in https://wheels.example.org/" in said
    assert "pass --wheelhouse DIR, a folder of wheels holding klpin>=1.0 and what they need" in said
    assert "s3cret" not in said, "the index's credentials are never shown"
    assert config.values["retries"] == ["0"] and config.values["index-url"] == ["http://user:s3cret@127.0.0.1:9/simple"]


def test_an_index_that_answers_at_all_says_nothing(tmp_path, only_env_config, monkeypatch):
    class NotFound(http.server.BaseHTTPRequestHandler):
        def do_HEAD(self) -> None:
            self.send_response(404)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), NotFound)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        monkeypatch.setenv("PIP_INDEX_URL", f"http://127.0.0.1:{server.server_address[1]}/simple")
        config = network.host_pip_config()
        out = io.StringIO()
        assert index.offline_notice(_recipe(tmp_path), config, dated=False, out=out) is config
        assert out.getvalue() == ""
    finally:
        server.shutdown()
        server.server_close()


def test_the_index_probed_is_the_one_pip_asks_first():
    local = network.PipConfig({"index-url": ["file:///srv/simple"]})
    assert index.pip_index(local, dated=False) is None          # served from this machine by the build
    assert index.pip_index(local, dated=True) == index.PYPI     # left out of a dated resolution: pip asks PyPI
    assert index.pip_index(network.PipConfig(), dated=False) == index.PYPI
    assert index.pip_index(network.PipConfig({"index-url": [CLOSED]}), dated=False) == CLOSED


@pytest.mark.parametrize("verb", ["bench", "profile"])
def test_against_passes_its_wheelhouse_to_the_recipe_build(tmp_path, monkeypatch, verb):
    from kernellab.cli.bench import bench
    from kernellab.cli.profile import profile

    task = bench if verb == "bench" else profile
    folder = with_layernorm_baseline(write_recipe(tmp_path / "fastop", COMMITS))
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    got: dict[str, object] = {}

    def fake_build(recipe, **kwargs):
        got.update(kwargs, recipe=recipe.name)
        raise BuildError("stop here")

    monkeypatch.setattr(build, "build", fake_build)
    monkeypatch.setattr(jobs, "in_repository", str)   # the recipe is the test's, outside the repository
    place = RecordingPlace()
    with pytest.raises(Exit, match="stop here"):
        task(context(place), k="layernorm", against=str(folder), wheelhouse=str(wheels))
    assert got == {"recipe": "fastop", "target": None, "wheelhouse": wheels}
    with pytest.raises(Exit, match=r"--wheelhouse installs recipe fastop's image offline; --native builds no image"):
        task(context(place), k="layernorm", against=str(folder), wheelhouse=str(wheels), native=True)
    with pytest.raises(Exit, match=rf"--wheelhouse is for the recipe image --against builds; `invoke {verb}` without"):
        task(context(place), k="layernorm", wheelhouse=str(wheels))


@pytest.mark.docker
@pytest.mark.slow
def test_a_recipe_build_says_at_once_that_the_index_does_not_answer_and_fails_fast(tmp_path, monkeypatch,
                                                                                  only_env_config):
    """Before pip's stage, not after its retries; the wheelhouse then builds the same recipe offline."""
    commits = make_mirror(tmp_path)
    mirror_env(tmp_path, monkeypatch)
    monkeypatch.setenv("KERNELLAB_CACHE", str(tmp_path / "cache"))
    engine.select("docker")
    docker = engine.by_name("docker")
    monkeypatch.setenv("PIP_INDEX_URL", CLOSED)
    recipe = read.load(str(write_recipe(tmp_path / "r" / "fastop", commits, pip=("klpin>=1.0",))))

    class Timed(io.StringIO):
        said_at: float | None = None

        def write(self, text: str) -> int:
            if SENTENCE in text and self.said_at is None:
                self.said_at = time.monotonic()
            return super().write(text)

    out = Timed()
    start = time.monotonic()
    with pytest.raises(BuildError, match="failed before its steps"):
        build.build(recipe, engine=docker, out=out)
    took = time.monotonic() - start
    assert out.said_at is not None, out.getvalue()
    assert out.said_at - start < 20, "said before the build, not after pip's retries"
    assert "--wheelhouse DIR" in out.getvalue()
    assert took < 60, f"pip tried the dead index once: {took:.0f} s"
    make_wheel(tmp_path / "wheels", "klpin", "1.0")
    offline = io.StringIO()
    build.build(recipe, wheelhouse=tmp_path / "wheels", engine=docker, out=offline)
    assert SENTENCE not in offline.getvalue(), "a wheelhouse needs no index: nothing is probed"
