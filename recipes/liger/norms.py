"""One case of the Liger recipe: RMSNorm or LayerNorm, Liger-Kernel's or PyTorch's, checked, then timed.

    python3 /recipe/norms.py --op rmsnorm --impl liger --hidden 16384 --rows 2048 --dtype bfloat16 --mode full

Written for kernellab (it calls the package; none of the package's code is here). First the outputs and the
input and weight gradients are compared with a float32 PyTorch computation of the same formula (printed as
relative errors, which the recipe's sanity checks bound): a fast wrong answer is not timed. Then the pass asked
for (forward, backward, or full: forward and backward) is timed with CUDA events, one sample per call after
warm-up, the L2 cache flushed before each; the median is printed. Last, the peak memory one full pass allocates
(inputs, outputs and gradients included, as the Liger-Kernel benchmarks count it).
"""
import argparse
import statistics

import torch
import torch.nn.functional as F

EPS = 1e-6  # the Liger-Kernel benchmarks' eps, for both norms


def torch_rmsnorm(x, w):
    """RMSNorm as Hugging Face's LlamaRMSNorm computes it: in float32, the weight applied in the input's dtype."""
    xf = x.float()
    y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + EPS)
    return w * y.to(x.dtype)


def torch_layernorm(x, w, b):
    return F.layer_norm(x, (x.shape[-1],), w, b, eps=EPS)


def liger(op):
    from liger_kernel.transformers.functional import liger_layer_norm, liger_rms_norm

    if op == "rmsnorm":  # not in place: the incoming gradient must survive for the check
        return lambda x, w: liger_rms_norm(x, w, EPS, 0.0, "llama", False)
    return lambda x, w, b: liger_layer_norm(x, w, b, EPS)


def inputs(op, rows, hidden, dtype, seed=0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    x = torch.randn(rows, hidden, device="cuda", dtype=dtype, generator=g)
    w = 1 + 0.1 * torch.randn(hidden, device="cuda", dtype=dtype, generator=g)
    args = [x, w] if op == "rmsnorm" else [x, w, 0.1 * torch.randn(hidden, device="cuda", dtype=dtype, generator=g)]
    dy = torch.randn(rows, hidden, device="cuda", dtype=dtype, generator=g)
    return [a.requires_grad_() for a in args], dy


def grads(fn, args, dy):
    for a in args:
        a.grad = None
    y = fn(*args)
    y.backward(dy)
    return y.detach(), [a.grad.detach().clone() for a in args]


def rel(a, b):
    return ((a.float() - b.float()).abs().max() / b.float().abs().max().clamp_min(1e-12)).item()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--op", choices=["rmsnorm", "layernorm"], required=True)
    p.add_argument("--impl", choices=["liger", "torch"], required=True)
    p.add_argument("--hidden", type=int, required=True)
    p.add_argument("--rows", type=int, default=2048)
    p.add_argument("--dtype", default="bfloat16")
    p.add_argument("--mode", choices=["forward", "backward", "full"], default="full")
    p.add_argument("--samples", type=int, default=50)
    a = p.parse_args()
    dtype = getattr(torch, a.dtype)
    plain = torch_rmsnorm if a.op == "rmsnorm" else torch_layernorm
    fn = liger(a.op) if a.impl == "liger" else plain
    print(f"{a.op} {a.impl}: rows {a.rows}, hidden {a.hidden}, {a.dtype}, {a.mode}; torch {torch.__version__}, "
          f"{torch.cuda.get_device_name()}")

    # Correct first: against the same formula in float32.
    args, dy = inputs(a.op, a.rows, a.hidden, dtype)
    y, gs = grads(fn, args, dy)
    wide = [t.detach().float().requires_grad_() for t in args]
    y_ref, gs_ref = grads(plain, wide, dy.float())
    print(f"rel_err_out: {rel(y, y_ref):.3e}")
    print(f"rel_err_grad: {max(rel(g, r) for g, r in zip(gs, gs_ref)):.3e}")

    flush = torch.empty(256 * 2**20, dtype=torch.int8, device="cuda")  # larger than any L2 cache
    times = []
    for i in range(10 + a.samples):
        for t in args:
            t.grad = None
        if a.mode == "backward":
            y = fn(*args)
        flush.zero_()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        if a.mode == "forward":
            with torch.no_grad():
                fn(*args)
        elif a.mode == "backward":
            y.backward(dy)
        else:
            fn(*args).backward(dy)
        end.record()
        end.synchronize()
        if i >= 10:
            times.append(start.elapsed_time(end))
    print(f"time_ms: {statistics.median(times):.6f}")

    # The peak of one full pass alone: the float32 check's tensors and the flush buffer are freed first.
    del flush, wide, y_ref, gs_ref, y, gs
    for t in args:
        t.grad = None
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    fn(*args).backward(dy)
    torch.cuda.synchronize()
    print(f"peak_mem_mb: {torch.cuda.max_memory_allocated() / 2**20:.3f}")


if __name__ == "__main__":
    main()
