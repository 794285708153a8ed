"""A fake container engine for unit tests: the real classes' command lines, canned inspect data.

Tests pass it as `engine=` instead of patching private functions; the docker- and podman-marked
integration tests are the evidence that the real engines behave.
"""
from __future__ import annotations

from typing import Any

from kernellab import engine


def fake(kind: str = "docker", images: dict[str, dict[str, Any]] | None = None) -> engine.Engine:
    """An engine of `kind` that answers and knows `images` ({ref: inspect dict}).

    `images` is read on every call, so a test that adds to its dict (a fake build) makes the image
    exist from then on. Containers it is asked to remove are recorded in `.removed`, not removed.
    """
    base = {"docker": engine.Docker, "podman": engine.Podman}[kind]

    class Fake(base):  # type: ignore[valid-type,misc]
        removed: list[str]

        def answers(self) -> bool:
            return True

        def inspect(self, ref: str) -> dict[str, Any] | None:
            found = (images or {}).get(ref)
            return self._normalize(found) if found else None

        def exists(self, ref: str) -> bool:
            return ref in (images or {})

        def builder(self) -> list[str]:
            return ["docker", "build"]

        def remove_container(self, name: str) -> None:
            self.removed.append(name)

    eng = Fake()
    eng.removed = []
    return eng


def image(image_id: str = "sha256:feed", env: list[str] | None = None, labels: dict[str, str] | None = None
          ) -> dict[str, Any]:
    return {"Id": image_id, "Config": {"Env": env or [], "Labels": labels or {}}, "RepoDigests": []}
