"""y = 2x (the planted op gets this right; its bug is the write after the end)."""
import torch


def make_inputs(shape, dtype, device, gen):
    return (torch.randn(shape["n"], dtype=dtype, device=device, generator=gen),)


def reference(x):
    return 2 * x
