"""A recipe's published system as a bench baseline (`invoke bench --against RECIPE`): the adapter contract, with a
stand-in package the test makes (a right one and a wrong one), the wrong one refused before it is timed, the
system's package named in the results; and what the task hands the bench."""
from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from invoke import Exit

import bench_fakes
from kernellab.bench import runner, systems
from kernellab.errors import BenchError
from places_fixtures import RecordingPlace, context
from recipe_fixtures import with_layernorm_baseline, write_recipe

SHA = "a" * 64
COMMITS = {"paper": "a" * 40, "helper": "b" * 40}


@pytest.fixture
def standin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A package `klstandin` 1.2.3 (installed, as importlib.metadata sees it) with a right and a wrong vector add,
    and a pip report of its wheel as a recipe image has one."""
    site = tmp_path / "site"
    (site / "klstandin").mkdir(parents=True)
    (site / "klstandin" / "__init__.py").write_text("def vadd(x, y):\n    return x + y\n\n"
                                                    "def vadd_wrong(x, y):\n    return x + y + 1\n")
    (site / "klstandin-1.2.3.dist-info").mkdir()
    (site / "klstandin-1.2.3.dist-info" / "METADATA").write_text("Metadata-Version: 2.1\nName: klstandin\nVersion: 1.2.3\n")
    monkeypatch.syspath_prepend(str(site))
    report = tmp_path / "report.json"
    report.write_text(json.dumps({"install": [{"metadata": {"name": "klstandin", "version": "1.2.3"},
                                               "download_info": {"archive_info": {"hashes": {"sha256": SHA}}}}]}))
    monkeypatch.setattr(systems, "REPORT", report)
    adapters = tmp_path / "recipe" / "baselines"
    adapters.mkdir(parents=True)
    (adapters / "vadd.py").write_text("import klstandin\n\ndef baseline(x, y):\n    return klstandin.vadd(x, y)\n")
    (adapters / "wrong.py").write_text("import klstandin\n\ndef baseline(x, y):\n    return klstandin.vadd_wrong(x, y)\n")
    (adapters / "missing.py").write_text("import kl_no_such_package\n\ndef baseline(x, y):\n    return x\n")
    (adapters / "nothing.py").write_text("X = 1\n")
    return tmp_path / "recipe"


def _offer(recipe: Path, adapter: str) -> systems.Offer:
    return systems.Offer("standin", str(recipe), {"vadd": str(recipe / "baselines" / adapter)}, ("klstandin",),
                         "A stand-in system")


def _run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, offer: systems.Offer) -> dict:
    monkeypatch.setenv("KERNELLAB_CACHE", str(tmp_path / "cache"))
    clock = bench_fakes.use_fake_clock(monkeypatch)
    real = systems.load

    def on_the_clock(offer: systems.Offer, report: Path | None = None) -> systems.System:
        """The system's adapters timed on the fake clock too (1 ms a call), as the fake ops' functions are."""
        system = real(offer, report)
        system.baselines = {op: bench_fakes.takes(clock, lambda: 1.0, fn) for op, fn in system.baselines.items()}
        return system

    monkeypatch.setattr(systems, "load", on_the_clock)
    specs = [bench_fakes.FakeSpec("vadd", bench_shapes=[{"n": 64}]), bench_fakes.FakeSpec("other", bench_shapes=[{"n": 64}])]
    doc, folder = runner.run(runner.Options(quick=True, out=tmp_path / "run", system=offer.to_json()),
                             catalog=bench_fakes.catalog(specs, {"kernellab": lambda x, y: x + y}, clock=clock),
                             log=io.StringIO())
    doc["summary"] = (folder / "summary.md").read_text()
    return doc


def test_a_systems_adapter_is_a_baseline_checked_then_timed_and_named_with_its_wheel(standin, tmp_path, monkeypatch):
    doc = _run(tmp_path, monkeypatch, _offer(standin, "vadd.py"))
    rows = {r["impl"]: r for r in doc["rows"]}
    assert {r["op"] for r in doc["rows"]} == {"vadd"}          # only the ops the system offers
    assert rows["standin"]["role"] == "baseline" and rows["standin"]["status"] == "ok" and rows["standin"]["stats"]
    assert "standin" in rows["kernellab"]["speedups"] and "eager" in rows["kernellab"]["speedups"]
    system = doc["systems"]["standin"]
    assert system["packages"] == {"klstandin": {"version": "1.2.3", "sha256": SHA}}
    assert system["label"] == "standin (klstandin 1.2.3, recipe recipe)"
    assert "Baseline `standin`: A stand-in system (klstandin 1.2.3, wheel sha256 aaaaaaaaaaaa)" in doc["summary"]
    assert "vs standin" in doc["summary"]


def test_a_wrong_baseline_is_refused_before_it_is_timed(standin, tmp_path, monkeypatch):
    doc = _run(tmp_path, monkeypatch, _offer(standin, "wrong.py"))
    wrong = next(r for r in doc["rows"] if r["impl"] == "standin")
    assert wrong["status"] != "ok" and "stats" not in wrong and "samples_ms" not in wrong, wrong
    kernellab = next(r for r in doc["rows"] if r["impl"] == "kernellab")
    assert "standin" not in kernellab["speedups"] and "eager" in kernellab["speedups"]


@pytest.mark.parametrize("adapter, message", [
    ("missing.py", r"cannot import its system \(No module named 'kl_no_such_package'\); run the bench in the recipe's image"),
    ("nothing.py", r"defines no baseline\(\*inputs\)"),
])
def test_an_adapter_that_cannot_serve_says_why(standin, adapter, message):
    with pytest.raises(BenchError, match=message):
        systems.load(_offer(standin, adapter))


def test_bench_against_a_recipe_hands_the_bench_its_offer(tmp_path):
    folder = with_layernorm_baseline(write_recipe(tmp_path / "fastop", COMMITS))
    from kernellab.cli.bench import bench

    place = RecordingPlace()
    bench(context(place), k="layernorm", quick=True, against=str(folder), native=True)
    argv = place.job.argv
    offer = systems.Offer.from_json(argv[argv.index("--system") + 1])
    assert offer.name == "fastop" and offer.adapters == {"layernorm": str(folder / "baselines" / "layernorm.py")}
    with pytest.raises(Exit, match=r"offers baselines for layernorm, which -k 'softmax' does not select"):
        bench(context(place), k="softmax", against=str(folder), native=True)
    plain = write_recipe(tmp_path / "plain", COMMITS)
    with pytest.raises(Exit, match=r"offers no baselines: a \[baselines\] table"):
        bench(context(place), k="layernorm", against=str(plain), native=True)
