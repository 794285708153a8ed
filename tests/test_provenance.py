"""One typed provenance (kernellab.provenance): a run here and a cluster run record the same facts, each collected
where it lives (the machine by whoever ran the cases, the checkout and the image by whoever planned them), and a
cluster run on a runtime other than Docker names its image, so export takes it. No engine, no GPU: fakes."""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from kernellab import gpu, proc, provenance
from kernellab.cluster.follow import Outcome
from kernellab.cluster.plan import Plan, Task
from kernellab.cluster.report import record as cluster_record
from kernellab.container.runner import LOCAL
from kernellab.places import Native
from kernellab.recipes import claims, on_cluster, on_node, read, record, reproduce
from kernellab.recipes.manifest import Manifest
from recipe_fixtures import write_recipe

IMAGE = "sha256:" + "7" * 64
BASE = "sha256:" + "8" * 64
H100 = gpu.HostGpu(0, "NVIDIA H100 80GB HBM3", "GPU-1", "9.0", "580.159.04", 81559)
SMI = "/usr/bin/nvidia-smi"


class Labels:
    """The submitting machine's engine, as far as a record asks it: the labels of the image and its base."""

    def labels(self, ref: str) -> dict[str, str]:
        return {IMAGE: {"kernellab.recipe-manifest-sha256": "9" * 64}, BASE: {"kernellab.lock-sha256": "6" * 64}}[ref]


@pytest.fixture
def one_h100(monkeypatch):
    """A host with one H100 whose nvidia-smi answers the clock query; git answers as it does."""
    real = proc.run

    def run(argv, *a, **kw):
        if argv[0] == SMI:
            return proc.Result(list(argv), 0, "345 MHz, 2619 MHz, 1980 MHz, 2619 MHz, 700.00 W, Enabled\n", "")
        return real(argv, *a, **kw)

    monkeypatch.setattr(provenance, "nvidia_smi", lambda: SMI)
    monkeypatch.setattr(provenance, "host_gpus", lambda: [H100])
    monkeypatch.setattr(proc, "run", run)
    monkeypatch.delenv("KERNELLAB_IMAGE_ID", raising=False)   # no Docker runner started the task
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    for name in gpu.SELECTION_VARS:
        monkeypatch.delenv(name, raising=False)


def _made_of(recipe) -> Manifest:
    return Manifest(recipe.name, "1" * 64, "cpu", BASE, {}, [], {"jobs": 2})


def _local(recipe, folder: Path) -> record.Run:
    """A run here as recipes.reproduce records it: this host (reproduce.machine_of), the checkout, the image's facts."""
    cases = _cases(recipe, folder)
    run = record.new(recipe, manifest=_made_of(recipe), image_id=IMAGE, machine=reproduce.machine_of(LOCAL, H100),
                     checkout=provenance.Checkout.here(),
                     image_facts={"tag": "kernellab-recipe:cpu-111111111111", "base_lock_sha256": "6" * 64,
                                  "recipe_manifest_sha256": "9" * 64},
                     cases=cases, verdicts=claims.judge(recipe, cases, gpu_name=H100.name), date=provenance.now(),
                     argv=["invoke", "recipe", "run", "fastop"], engine="docker")
    record.write(folder, run)
    return record.load(folder)


def _cases(recipe, tmp: Path):
    from kernellab.recipes import experiments

    return experiments.run_all(recipe.experiments, {}, place=_InSrc(recipe.folder, tmp), raw=tmp / "raw", quick=True,
                               out=open("/dev/null", "w"))


class _InSrc:
    """The Native place a task runs its cases in, with the image's /src at tmp/src."""

    def __init__(self, recipe_folder: Path, tmp: Path) -> None:
        self.src, self.folder = tmp / "src", recipe_folder
        (self.src / "out").mkdir(parents=True, exist_ok=True)
        (self.src / "out" / "config").write_text("SPEED=5\n")
        (self.src / "bench.sh").write_text('. out/config\necho "max diff: 0.001"\necho "time: $(( $1 * 10 / SPEED )) ms"\n')

    def run(self, job):
        line = job.argv[-1].replace("cd /src/.", f"cd {self.src}").replace("/recipe/", f"{self.folder}/")
        return Native().run(dataclasses.replace(job, argv=(*job.argv[:-1], line)))


def _cluster(recipe, tmp: Path, monkeypatch, runtime: str) -> Path:
    """A cluster run as its code paths make it: the plan (runs.start's checkout, the converted image), each task on
    its node (recipes.on_node), cluster.json (cluster.report.record), then the merge (recipes.on_cluster)."""
    local = tmp / "results" / "run1"
    tmp.mkdir(parents=True, exist_ok=True)
    monkeypatch.setattr(on_node, "IN_IMAGE", tmp / "no-image")
    monkeypatch.setattr(on_node, "MANIFEST", tmp / "manifest.json")
    (tmp / "manifest.json").write_text(json.dumps(_made_of(recipe).to_dict()))
    tasks = [Task("h100", i, e.name, []) for i, e in enumerate(recipe.experiments)]
    plan = Plan(run="run1", job="recipe", rundir=str(tmp / "shared"), runtime=runtime, gpu_mode="",
                image={"ref": "kernellab-recipe:cpu-111111111111", "id": IMAGE, "path": str(tmp / "image.sif")},
                tasks=tasks, argv=["invoke", "recipe", "run", "fastop", "--on", "slurm"],
                checkout=provenance.Checkout.here())
    for t in tasks:
        place = _InSrc(recipe.folder, tmp)
        assert on_node.main([str(recipe.folder), t.name, "--quick", "--out", str(local / "h100" / t.name)], place=place) == 0
    status = {"host": "node7", "gpus": [{"index": "0", "name": H100.name, "uuid": H100.uuid}]}
    cluster_record(plan, [Outcome(t, "completed", "", status) for t in tasks], local)
    on_cluster.merge(local, ["h100"], [Outcome(t, "done", "", status) for t in tasks], eng=Labels())  # type: ignore[arg-type]
    return local / "h100"


def _shape(data: object) -> object:
    """The keys of a record, nested, without values."""
    if isinstance(data, dict):
        return {k: _shape(v) for k, v in data.items() if k not in ("cases", "claims")}
    return None


def test_a_local_record_and_a_cluster_record_have_the_same_fields(tmp_path, monkeypatch, one_h100):
    recipe = read.load(str(write_recipe(tmp_path / "fastop", {"paper": "a" * 40, "helper": "b" * 40})))
    here = _local(recipe, tmp_path / "here")
    there = record.load(_cluster(recipe, tmp_path, monkeypatch, "apptainer"))
    local, cluster = here.to_dict(), there.to_dict()
    del cluster["machine"]["gpu_type"]   # the cluster's name of the GPU type: a cluster's only
    assert _shape(local) == _shape(cluster)
    for run in (here, there):
        assert run.checkout.commit and run.checkout.dirty is not None and run.date and run.argv and run.engine
        assert run.image.id == IMAGE and run.image.tag and run.image.base_lock_sha256 == "6" * 64
        assert run.machine.gpu_name == H100.name and run.machine.driver == H100.driver
        assert run.machine.clocks["clocks.max.sm"] == "1980 MHz" and run.machine.host
    assert there.checkout == here.checkout and there.engine == "apptainer" and there.machine.gpu_type == "h100"


class _Server:
    """A server --host names (kernellab.remote.SshHost), as far as a record asks it: its hostname and the GPUs its
    nvidia-smi listed."""

    def hostname(self) -> str:
        return "gpu-box"

    def gpus(self) -> list[gpu.HostGpu]:
        return [gpu.HostGpu(0, "NVIDIA A100-SXM4-80GB", "GPU-9", "8.0", "570.86.15", 81920)]


def test_a_record_made_for_a_remote_host_names_that_host_and_its_gpu(tmp_path, monkeypatch):
    """--host ssh://...: the record's machine is the server the cases ran on (its hostname, the GPU it listed, that
    GPU's driver), not this machine; no clocks, for this machine's nvidia-smi is not asked about another's GPU."""
    monkeypatch.setattr(provenance, "nvidia_smi", lambda: pytest.fail("this machine's nvidia-smi was asked"))
    recipe = read.load(str(write_recipe(tmp_path / "fastop", {"paper": "a" * 40, "helper": "b" * 40})))
    server = _Server()
    a100 = server.gpus()[0]
    machine = reproduce.machine_of(server, a100)  # type: ignore[arg-type]
    folder = record.run_folder(recipe.name, machine.gpu_name, tmp_path / "results")
    cases = _cases(recipe, folder)
    record.write(folder, record.new(recipe, manifest=_made_of(recipe), image_id=IMAGE, machine=machine,
                                    checkout=provenance.Checkout.here(), cases=cases,
                                    verdicts=claims.judge(recipe, cases, gpu_name=machine.gpu_name)))
    back = record.load(folder).machine
    assert back.host == "gpu-box" and back.gpu_name == a100.name and back.driver == "570.86.15"
    assert back.gpu and back.gpu.get("uuid") == "GPU-9" and back.gpu.get("memory_mib") == 81920
    assert back.clocks == {} and folder.name.endswith("-a100-sxm4-80gb")


def test_a_cluster_run_on_a_runtime_other_than_docker_is_exported_with_its_image(tmp_path, monkeypatch, one_h100):
    """No KERNELLAB_IMAGE_ID on the node (only kernellab's Docker runner sets it): the plan names the image."""
    recipe = read.load(str(write_recipe(tmp_path / "fastop", {"paper": "a" * 40, "helper": "b" * 40})))
    for runtime in ("apptainer", "enroot", "charliecloud"):
        folder = _cluster(recipe, tmp_path / runtime, monkeypatch, runtime)
        assert record.load(folder).image.id == IMAGE
        mine, left = reproduce._runs_of(IMAGE, (folder,))
        assert mine == [folder] and not left


def test_old_records_keep_what_they_wrote_and_read_back_typed():
    """A machine object with the checkout in it, a key no type knows, no tree: read typed, written back the same."""
    data = {"gpu": None, "driver": None, "clocks": {}, "host": "box", "kernellab_commit": "c" * 40,
            "kernellab_dirty": True, "kernellab_changes_sha256": None}
    machine, checkout = record.run._machine(data)
    assert checkout == provenance.Checkout("c" * 40, True) and machine.extra == {"kernellab_changes_sha256": None}
    image = {"id": IMAGE, "target": "cpu", "recipe_sha256": "1" * 64, "base_id": BASE, "recipe_lock_sha256": "f"}
    assert provenance.ImageFacts.from_dict(image).to_dict() == image
