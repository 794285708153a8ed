"""c = a @ b for row-major (m, k) and (k, n) matrices."""
import torch


def make_inputs(shape, dtype, device, gen):
    m, n, k = shape["m"], shape["n"], shape["k"]
    a = torch.randn(m, k, dtype=dtype, device=device, generator=gen)
    # Scaled so that outputs stay near 1 at any k: tolerances then mean the same at every shape.
    b = torch.randn(k, n, dtype=dtype, device=device, generator=gen) * k**-0.5
    return a, b


def reference(a, b):
    return torch.matmul(a, b)


def empty_output(a, b):
    return a.new_empty(a.shape[0], b.shape[1])


def shape_errors(a, b):
    yield (a, b[:-1]), "columns must equal"
    yield (a[0], b), "must have 2 dimensions"
