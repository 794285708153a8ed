"""Tiny stand-ins for kernellab.ops, so the bench engine is tested without kernels or a GPU."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Callable

import torch


@dataclass(frozen=True)
class FakeSpec:
    name: str
    kind: str = "cpu"
    bench_shapes: list[dict[str, int]] = field(default_factory=lambda: [{"n": 4096}, {"n": 8192}])
    bench_dtypes: list[str] = field(default_factory=lambda: ["float32"])
    seeds: list[int] = field(default_factory=lambda: [0])
    tolerances: dict[str, tuple[float, float]] = field(default_factory=dict)
    baselines: list[str] = field(default_factory=lambda: ["eager"])
    path: Path = Path("kernels/fake")
    description: str = "a fake op"

    def bytes_moved(self, shape: dict[str, int], dtype: str) -> int:
        return 3 * shape["n"] * 4

    def flops(self, shape: dict[str, int], dtype: str) -> int:
        return shape["n"]

    @property
    def needs_gpu(self) -> bool:
        return self.kind != "cpu"


class FakeModule:
    """vector add: `kernellab` is right, `broken` is off by one, `raises` raises."""

    def __init__(self, spec: FakeSpec, candidates: dict[str, Callable[..., Any]]):
        self.spec = spec
        self.candidates = candidates
        self.baselines = {"eager": torch.add}

    def make_inputs(self, shape: dict[str, int], dtype: str, device: str, seed: int) -> tuple:
        g = torch.Generator().manual_seed(seed)
        dt = getattr(torch, dtype)
        return (torch.randn(shape["n"], generator=g).to(device, dt),
                torch.randn(shape["n"], generator=g).to(device, dt))

    def reference(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return (x.double() + y.double()).to(x.dtype)


def _raises(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    raise RuntimeError("kernel launch failed: invalid configuration argument")


def _mutates(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return x.add_(y)


CANDIDATES: dict[str, Callable[..., Any]] = {
    "kernellab": lambda x, y: x + y,
    "broken": lambda x, y: x + y + 1,
    "raises": _raises,
    "mutates": _mutates,
}


def catalog(specs: list[FakeSpec] | None = None, candidates: dict[str, Callable[..., Any]] | None = None,
            failing: tuple[str, ...] = ()) -> SimpleNamespace:
    """An object with the `discover` and `load` functions of kernellab.ops."""
    specs = specs if specs is not None else [FakeSpec("vadd"), FakeSpec("gpu_only", kind="cuda")]

    def discover(root: Any = None, select: str | None = None) -> list[FakeSpec]:
        return [s for s in specs if select is None or select in s.name]

    def load(spec: FakeSpec, *, verbose: bool = False) -> FakeModule:
        if spec.name in failing:
            raise RuntimeError("nvcc: error: identifier 'blockIdx' is undefined")
        return FakeModule(spec, dict(candidates if candidates is not None else CANDIDATES))

    return SimpleNamespace(discover=discover, load=load)
