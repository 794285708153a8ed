"""RMSNorm over the last dim of a (rows, cols) tensor, with a weight, as LLMs use it:
y = x / sqrt(mean(x^2) + eps) * weight, computed in float32 (or wider) and returned in the input's dtype."""
import torch

EPS = 1e-6  # the binding's default eps


def make_inputs(shape, dtype, device, gen):
    rows, cols = shape["rows"], shape["cols"]
    x = torch.randn(rows, cols, dtype=dtype, device=device, generator=gen)
    weight = 1 + 0.1 * torch.randn(cols, dtype=dtype, device=device, generator=gen)
    return x, weight


def reference(x, weight):
    # float32 for 16-bit inputs, float64 for the check's float64 copies: never narrower than the input.
    wide = torch.promote_types(x.dtype, torch.float32)
    xf = x.to(wide)
    y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + EPS) * weight.to(wide)
    return y.to(x.dtype)


def shape_errors(x, weight):
    yield (x, weight[:-1]), "weight has shape"
    yield (x[0], weight), "must have 2 dimensions"
