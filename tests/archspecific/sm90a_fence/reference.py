"""y = x + 1 (what the sm_90a code computes)."""
import torch


def make_inputs(shape, dtype, device, gen):
    return (torch.randn(shape["n"], dtype=dtype, device=device, generator=gen),)


def reference(x):
    return x + 1
