"""RMSNorm over the last dim, with a weight: y = x / sqrt(mean(x^2) + eps) * weight."""
import torch

EPS = 1e-6  # the binding's default eps


def make_inputs(shape, dtype, device, gen):
    x = torch.randn(shape["rows"], shape["cols"], dtype=dtype, device=device, generator=gen)
    weight = 1 + 0.5 * torch.randn(shape["cols"], dtype=dtype, device=device, generator=gen)
    return x, weight


def reference(x, weight):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + EPS) * weight


def shape_errors(x, weight):
    yield (x, weight[:-1]), "weight has shape"
    yield (x[0], weight), "must have 2 dimensions"
