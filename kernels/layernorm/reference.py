"""LayerNorm over the last dim of a (rows, cols) tensor, with weight and bias."""
import torch
import torch.nn.functional as F

EPS = 1e-5  # the binding's default eps


def make_inputs(shape, dtype, device, gen):
    rows, cols = shape["rows"], shape["cols"]
    # A non-zero mean: a variance computed as E[x^2] - E[x]^2 would lose digits here.
    x = 2 + torch.randn(rows, cols, dtype=dtype, device=device, generator=gen)
    weight = 1 + 0.1 * torch.randn(cols, dtype=dtype, device=device, generator=gen)
    bias = 0.1 * torch.randn(cols, dtype=dtype, device=device, generator=gen)
    return x, weight, bias


def reference(x, weight, bias):
    return F.layer_norm(x, (x.shape[-1],), weight, bias, eps=EPS)


def shape_errors(x, weight, bias):
    yield (x, weight[:-1], bias), "weight has shape"
    yield (x, weight, bias[:-1]), "bias has shape"
    yield (x[0], weight, bias), "must have 2 dimensions"
