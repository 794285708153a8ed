"""c = a + b, elementwise."""
import torch


def make_inputs(shape, dtype, device, gen):
    a = torch.randn(shape["n"], dtype=dtype, device=device, generator=gen)
    b = torch.randn(shape["n"], dtype=dtype, device=device, generator=gen)
    return a, b


def reference(a, b):
    return a + b


def shape_errors(a, b):
    yield (a, b[:-1]), "b has shape"
