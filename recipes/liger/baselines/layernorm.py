"""kernels/layernorm's inputs -> Liger-Kernel's LayerNorm: the adapter `invoke bench -k layernorm --against liger`
loads in the recipe's image. Its eps is the op's (kernels/layernorm/reference.py), so the outputs compare."""
from liger_kernel.transformers.functional import liger_layer_norm

EPS = 1e-5  # kernels/layernorm/reference.py's EPS


def baseline(x, weight, bias):
    return liger_layer_norm(x, weight, bias, EPS)
