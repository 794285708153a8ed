"""y[i] = x[the element 32 places further on within its block of 256, wrapping]."""
import torch

BLOCK = 256


def make_inputs(shape, dtype, device, gen):
    return (torch.randn(shape["n"], dtype=dtype, device=device, generator=gen),)


def reference(x):
    return torch.roll(x.view(-1, BLOCK), shifts=-32, dims=1).reshape(-1)
