"""A recipe's inputs (kernellab.recipes.inputs): declared in recipe.toml, made once in the cache, fetched with
their sha256 checked (or recorded at the first download), replaced by their stand-in where the data cannot be
had, and every claim on a stand-in not judged. Commands that run "in the image" run here with bash, their
/out and /download mounts mapped to the host folders (the real container path is in test_recipes_docker.py)."""
from __future__ import annotations

import hashlib
import http.server
import io
import json
import re
import subprocess
import threading
from pathlib import Path

import pytest

from kernellab.errors import RecipeError
from kernellab.recipes import claims, inputs, read
from recipe_fixtures import write_recipe

COMMITS = {"paper": "a" * 40, "helper": "b" * 40}


class bash_in_image:
    """A place that runs the job's command here: each mount HOST:/PATH[:ro] is PATH rewritten to HOST."""

    def __init__(self, calls: list[str]):
        self.calls = calls

    def run(self, job) -> int:
        command = job.argv[-1]
        for m in job.mounts:
            host, inside = m.split(":")[:2]
            command = command.replace(inside, host)
        self.calls.append(command)
        with open(job.output, "w") as out:
            return subprocess.run(["bash", "-c", command], stdout=out, stderr=subprocess.STDOUT).returncode


INPUTS = """
[[inputs]]
name = "graph"
description = "the paper's graph"
url = "{url}"
sha256 = "{sha}"
[inputs.stand_in]
run = "python3 -c \\"open('/out/graph.txt', 'w').write('stand-in 1000')\\""
description = "a random graph of the same size"
[inputs.quick]
run = "echo small > /out/graph.txt"
description = "a small random graph"
"""


def _recipe(tmp_path: Path, url: str = "http://127.0.0.1:9/none.txt", sha: str = "", extra: str = ""):
    folder = write_recipe(tmp_path / "fastop", COMMITS, extra=INPUTS.format(url=url, sha=sha) + extra)
    _reads(folder, "graph")
    return read.load(str(folder))


def _reads(folder: Path, name: str) -> None:
    """The fixture's experiment fastop reads input `name`."""
    text = (folder / "recipe.toml").read_text()
    (folder / "recipe.toml").write_text(re.sub(r'(name = "fastop"\n\s*)(run = "bash bench)', rf'\1inputs = ["{name}"]\n\2',
                                               text, count=1))


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("KERNELLAB_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


@pytest.fixture
def served(tmp_path):
    """A local HTTP server for the download (the real one would be the paper's host)."""
    root = tmp_path / "www"
    root.mkdir()
    (root / "graph.txt").write_text("the real graph\n")
    handler = type("H", (http.server.SimpleHTTPRequestHandler,), {
        "__init__": lambda self, *a, **k: http.server.SimpleHTTPRequestHandler.__init__(self, *a, directory=str(root), **k),
        "log_message": lambda self, *a: None})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/graph.txt", hashlib.sha256(b"the real graph\n").hexdigest()
    server.shutdown()


def test_inputs_are_read_with_their_stand_ins_and_experiments_name_them(tmp_path):
    recipe = _recipe(tmp_path)
    graph = recipe.input("graph")
    assert graph.url.startswith("http://") and graph.stand_in and graph.quick
    assert recipe.experiment("fastop").inputs == ("graph",)
    with pytest.raises(RecipeError, match="has no input `grap`; did you mean `graph`"):
        recipe.input("grap")


@pytest.mark.parametrize("bad,expect", [
    ('[[inputs]]\nname = "g"\ndescription = "d"\n', "inputs[0].url or run must say where the data comes from"),
    ('[[inputs]]\nname = "g"\ndescription = "d"\nurl = "http://x/y"\nsha256 = "abc"\n', "inputs[0].sha256 must be the download's sha256"),
    ('[[inputs]]\nname = "g"\ndescription = "d"\nrun = "true"\n[inputs.stand_in]\nrun = "true"\n', "inputs[0].stand_in.description is missing"),
])
def test_a_malformed_input_is_one_sentence_naming_the_key(tmp_path, bad, expect):
    folder = write_recipe(tmp_path / "bad", COMMITS, extra="\n" + bad)
    with pytest.raises(RecipeError, match=re.escape(expect)):
        read.load(str(folder))


def test_an_experiment_naming_an_unknown_input_is_refused(tmp_path):
    folder = write_recipe(tmp_path / "bad", COMMITS)
    _reads(folder, "nope")
    with pytest.raises(RecipeError, match="inputs names `nope`, which is not an input"):
        read.load(str(folder))


def test_the_download_is_checked_against_its_sha256_and_made_once(tmp_path, cache, served):
    url, sha = served
    recipe = _recipe(tmp_path, url=url, sha=sha)
    calls: list[str] = []
    out = io.StringIO()
    ready = inputs.prepare_all(recipe, ["graph"], place=bash_in_image(calls), out=out)["graph"]
    assert ready.kind == inputs.DATA and (ready.folder / "graph.txt").read_text() == "the real graph\n"
    assert ready.mount.endswith(":/inputs/graph:ro")
    again = inputs.prepare_all(recipe, ["graph"], place=bash_in_image(calls), out=out)["graph"]
    assert again == ready and not list((cache / "recipes" / "inputs").rglob("*.partial"))


def test_a_download_that_does_not_match_is_deleted_and_the_stand_in_is_used_saying_so(tmp_path, cache, served):
    url, _ = served
    recipe = _recipe(tmp_path, url=url, sha="0" * 64)
    out = io.StringIO()
    ready = inputs.prepare_all(recipe, ["graph"], place=bash_in_image([]), out=out)["graph"]
    assert ready.kind == inputs.STAND_IN and (ready.folder / "graph.txt").read_text() == "stand-in 1000"
    text = out.getvalue()
    assert "has sha256" in text and "not " + "0" * 64 in text and "using its STAND-IN" in text
    assert not list((cache / "recipes" / "inputs").rglob("downloads/graph.txt"))


def test_without_a_sha256_the_first_download_records_it_and_later_ones_must_match(tmp_path, cache, served):
    url, sha = served
    recipe = _recipe(tmp_path, url=url)
    out = io.StringIO()
    inputs.prepare_all(recipe, ["graph"], place=bash_in_image([]), out=out)
    assert inputs.recorded(recipe)["graph"] == {"url": url, "sha256": sha, "bytes": 15}
    assert "commit it" in out.getvalue()


def test_no_network_means_the_stand_in_and_quick_means_the_small_one(tmp_path, cache):
    recipe = _recipe(tmp_path)  # port 9: nothing listens
    out = io.StringIO()
    full = inputs.prepare_all(recipe, ["graph"], place=bash_in_image([]), out=out)["graph"]
    assert full.kind == inputs.STAND_IN and "could not be downloaded" in out.getvalue()
    quick = inputs.prepare_all(recipe, ["graph"], place=bash_in_image([]), quick=True, out=out)["graph"]
    assert quick.kind == inputs.QUICK and (quick.folder / "graph.txt").read_text() == "small\n"
    about = json.loads((quick.folder / "input.json").read_text())
    assert about["kind"] == "quick stand-in" and about["sha256"] == quick.sha256


def test_made_data_is_made_once_and_again_when_its_command_changes(tmp_path, cache):
    recipe = _recipe(tmp_path)
    calls: list[str] = []
    first = inputs.prepare_all(recipe, ["graph"], place=bash_in_image(calls), stand_in=True,
                               out=io.StringIO())["graph"]
    inputs.prepare_all(recipe, ["graph"], place=bash_in_image(calls), stand_in=True, out=io.StringIO())
    assert len(calls) == 1, "the cache serves the second run"
    other = _recipe(tmp_path / "b", extra="")
    (other.folder / "recipe.toml").write_text((other.folder / "recipe.toml").read_text().replace("stand-in 1000", "stand-in 2000"))
    other = read.load(str(other.folder))
    second = inputs.prepare_all(other, ["graph"], place=bash_in_image(calls), stand_in=True,
                                out=io.StringIO())["graph"]
    assert second.folder != first.folder and len(calls) == 2


def test_a_failing_command_names_its_log_and_leaves_no_half_made_data(tmp_path, cache):
    recipe = _recipe(tmp_path)

    class failing:
        @staticmethod
        def run(job):
            job.output.write_text("Traceback: MemoryError\n")
            return 1

    with pytest.raises(RecipeError, match=r"(?s)making input graph \(stand-in.*exit code 1.*MemoryError"):
        inputs.prepare_all(recipe, ["graph"], place=failing, stand_in=True, out=io.StringIO())
    assert not [p for p in (cache / "recipes" / "inputs").rglob("*") if p.is_dir() and p.name.startswith("stand-in-")
                and not p.name.endswith(".partial")]


def test_claims_on_an_experiment_that_read_a_stand_in_are_not_run(tmp_path, cache):
    recipe = _recipe(tmp_path)
    ready = inputs.prepare_all(recipe, ["graph"], place=bash_in_image([]), quick=True, out=io.StringIO())
    made = inputs.stand_ins(recipe, ready)
    assert made == {"fastop": "graph was a quick stand-in: a small random graph"}
    verdicts = claims.judge(recipe, [], gpu_name="H100", stand_ins=made)
    assert verdicts and all(v.verdict == "not run" and v.why.startswith("stand-in data (graph was a quick stand-in")
                            for v in verdicts)


def test_a_metric_may_take_the_best_of_a_sweep(tmp_path):
    from kernellab.recipes import experiments

    sweep = "average time of 5 runs: 0.0003 sec\naverage time of 5 runs: 0.0001 sec\naverage time of 5 runs: 0.0002 sec\n"
    pattern = r"average time of \d+ runs: ([0-9.eE+-]+) sec"
    assert experiments.extract(pattern, sweep) == 0.0002
    assert experiments.extract(pattern, sweep, "min") == 0.0001 and experiments.extract(pattern, sweep, "max") == 0.0003
    folder = write_recipe(tmp_path / "r", COMMITS)
    (folder / "recipe.toml").write_text((folder / "recipe.toml").read_text().replace(
        "unit = \"ms\" }]\n", "unit = \"ms\", reduce = \"least\" }]\n", 1))
    with pytest.raises(RecipeError, match=r'metrics\[0\].reduce must be "last", "min" or "max"'):
        read.load(str(folder))


def test_a_recipe_that_also_runs_on_cpu_runs_its_cpu_experiments_in_a_cpu_target(tmp_path):
    from kernellab.recipes import build, experiments

    folder = write_recipe(tmp_path / "r", COMMITS, target="cpu")
    text = (folder / "recipe.toml").read_text().replace("[[sources]]", '[requirements]\narchs = ["8.0"]\n\n[[sources]]', 1)
    (folder / "recipe.toml").write_text(text)
    with pytest.raises(RecipeError, match="is GPU code"):
        build.resolve_target(read.load(str(folder)))
    (folder / "recipe.toml").write_text(text.replace('archs = ["8.0"]', 'archs = ["8.0"]\ncpu = true'))
    _reads_cuda = re.sub(r'(name = "baseline"\n\s*)(run =)', r'\1needs_cuda = true\n\2', (folder / "recipe.toml").read_text())
    (folder / "recipe.toml").write_text(_reads_cuda)
    recipe = read.load(str(folder))
    spec, _ = build.resolve_target(recipe)
    assert spec.cuda is None
    out = io.StringIO()
    kept = experiments.runnable(list(recipe.experiments), cuda=spec.cuda, target="cpu", recipe=recipe, out=out)
    assert [e.name for e in kept] == ["fastop"] and "not run here: baseline (they need CUDA" in out.getvalue()
    with pytest.raises(RecipeError, match="baseline needs CUDA, and target cpu has none"):
        experiments.runnable([recipe.experiment("baseline")], cuda=None, target="cpu", recipe=recipe, out=out)
    assert experiments.runnable(list(recipe.experiments), cuda="12.4", target="x", recipe=recipe, out=out) == \
        list(recipe.experiments)


def test_use_cuda_says_whether_the_target_has_cuda():
    from kernellab.image.resolve import resolve
    from kernellab.image.targets import load
    from kernellab.recipes import values

    m = load()
    facts = {"python": "/usr/bin/python3", "python_version": "3.9", "torch": "", "cxx11_abi": "", "cuda_home": "",
             "llvm_config": "/usr/bin/llvm-config-11", "cuda_stub": ""}
    assert values.values(resolve(m, target="cpu-debian11"), facts)["use_cuda"] == "OFF"
    assert values.values(resolve(m, target="cu112-debian11"), facts)["use_cuda"] == "ON"


def test_the_recipes_pip_layer_resolves_as_of_its_day(tmp_path):
    folder = write_recipe(tmp_path / "r", COMMITS, pip=("numpy",))
    text = (folder / "recipe.toml").read_text()
    (folder / "recipe.toml").write_text(re.sub(r"(pip = \[.numpy.\])", r"\1\nas_of = 2021-06-17", text, count=1))
    assert read.load(str(folder)).as_of == "2021-06-17"
    (folder / "recipe.toml").write_text(re.sub(r"(pip = \[.numpy.\])", r'\1\nas_of = "soon"', text, count=1))
    with pytest.raises(RecipeError, match="`as_of` must be a day"):
        read.load(str(folder))


def test_a_sweep_is_plotted_and_a_stand_in_says_so_on_the_plot(tmp_path):
    from kernellab.recipes import record
    from kernellab.recipes.experiments import Case

    cases = [Case("spmm", {"feat_len": f}, metrics={"best_s": 0.001 * f}) for f in (32, 64, 128)]
    record.plot_metrics(tmp_path, cases, {"best_s": "s"}, stand_in=True)
    assert (tmp_path / "metrics.png").stat().st_size > 5000
    other = tmp_path / "two-params"
    other.mkdir()
    record.plot_metrics(other, [Case("x", {"a": 1, "b": 2}, metrics={"m": 1.0})], {})
    assert not (other / "metrics.png").exists(), "only a one-number sweep is drawn"
