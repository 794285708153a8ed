"""Default correctness tolerances: the one table that kernel tests and the benchmark gate share.

An output passes when `torch.testing.assert_close(out, expected, atol=atol, rtol=rtol)` holds, with
`expected` the reference computed on float64 copies of the inputs and cast to the inputs' dtype.
`tests/test_kernels.py` checks with `OpSpec.tolerances` (filled from here by `spec.parse_spec`);
`kernellab.bench.runner` gates timing on the same (atol, rtol) through `for_dtype`. An op whose
arithmetic needs more room declares `[tolerances]` in its op.toml (kernels/README.md); that wins
on both paths.
"""
from __future__ import annotations

from collections.abc import Mapping

from ..errors import ConfigError

#: dtype name -> (atol, rtol). Near 1, fp16 1e-3 is one ulp (2^-10) and bf16 1e-2 a little over
#: one (2^-7 ~ 7.8e-3): room for a different rounding order, not for a wrong element. fp32 and
#: fp64 leave room for reductions accumulated in another order than PyTorch's.
DEFAULTS: dict[str, tuple[float, float]] = {
    "float64": (1e-7, 1e-7),
    "float32": (1e-4, 1e-4),
    "float16": (1e-3, 1e-3),
    "bfloat16": (1e-2, 1e-2),
}


def for_dtype(dtype: str, overrides: Mapping[str, tuple[float, float]] | None = None) -> tuple[float, float]:
    """(atol, rtol) for `dtype`: the op's own entry when it has one, else the default."""
    if overrides and dtype in overrides:
        atol, rtol = overrides[dtype]
        return float(atol), float(rtol)
    try:
        return DEFAULTS[dtype]
    except KeyError:
        raise ConfigError(f"no default tolerance for dtype {dtype!r}; known: {', '.join(DEFAULTS)} "
                          "(src/kernellab/ops/tolerances.py).") from None
