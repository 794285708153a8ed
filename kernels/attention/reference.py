"""Attention with a key-padding mask: softmax(q k^T / sqrt(d), keys j >= lengths[b] masked) v.

q, k, v: (batch, heads, seq, head_dim); lengths: (batch,) int32, the valid keys of each sequence (all of them at keep_pct = 100).
"""
import math

import torch
import torch.nn.functional as F


def make_inputs(shape, dtype, device, gen):
    size = (shape["batch"], shape["heads"], shape["seq"], shape["head_dim"])
    q, k, v = (torch.randn(size, dtype=dtype, device=device, generator=gen) for _ in range(3))
    seq = shape["seq"]
    # The first sequence is full; the others keep between keep_pct% and all of their keys.
    least = min(seq, seq * shape["keep_pct"] // 100 + 1)
    lengths = torch.randint(least, seq + 1, (shape["batch"],), generator=gen, device=device, dtype=torch.int32)
    lengths[0] = seq
    return q, k, v, lengths


def _keep(lengths, seq):
    """(batch, 1, 1, seq) boolean: True where a key is valid."""
    return (torch.arange(seq, device=lengths.device) < lengths[:, None])[:, None, None, :]


def reference(q, k, v, lengths):
    """The unfused computation: the full score matrix, masked, softmaxed, times v."""
    scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    scores = scores.masked_fill(~_keep(lengths, q.shape[-2]), float("-inf"))
    return torch.softmax(scores, dim=-1) @ v


def baseline_sdpa(q, k, v, lengths):
    return F.scaled_dot_product_attention(q, k, v, attn_mask=_keep(lengths, q.shape[-2]))


def shape_errors(q, k, v, lengths):
    yield (q, k[:, :, :-1], v, lengths), "k has shape"
    yield (q, k, v, lengths[:-1] if len(lengths) > 1 else lengths.repeat(2)), "lengths has shape"
    yield (q[..., :48].contiguous(), k[..., :48].contiguous(), v[..., :48].contiguous(), lengths), "head size"
    many = q.new_zeros((65536, 1, 1, 64))  # one grid row per (batch, head): CUDA allows 65535
    yield (many, many, many, lengths.new_ones(65536)), "batch \\* heads"
