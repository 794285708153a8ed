"""A place that records what a task hands it: tests give it to a task through invoke's config
(`kernellab.place`, which kernellab.places.choose honours) instead of patching how containers start."""
from __future__ import annotations

from typing import Any

from invoke import Config, Context

from kernellab.jobs import Job


class RecordingPlace:
    def __init__(self, code: int = 0):
        self.jobs: list[Job] = []
        self.code = code

    def run(self, job: Job) -> int:
        self.jobs.append(job)
        return self.code

    @property
    def job(self) -> Job:
        (job,) = self.jobs
        return job


def context(place: Any = None, **config: Any) -> Context:
    """An invoke context whose tasks run their jobs in `place` (and see `config` as kernellab.*)."""
    return Context(Config(overrides={"kernellab": {**config, **({"place": place} if place is not None else {})}}))
