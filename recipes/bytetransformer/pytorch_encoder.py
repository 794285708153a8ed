"""The PyTorch baseline ByteTransformer's README compares against: the same BERT encoder (padded, masked, eager),
the same shapes and random weights, timed the way the (patched) paper script times ByteTransformer: 5 warm-ups,
then the wall clock over N iterations between two synchronizations. Prints `time costs:    X.XX ms`."""
import argparse
import timeit

import torch
import torch.nn.functional as F


def main() -> None:
    p = argparse.ArgumentParser()
    for name in ("batch_size", "seqlen", "head_num", "head_size"):
        p.add_argument(name, type=int)
    p.add_argument("--avg_seqlen", type=int, default=0)
    p.add_argument("--n_layers", type=int, default=12)
    p.add_argument("--dtype", choices=["fp16", "fp32"], default="fp16")
    p.add_argument("--iters", type=int, default=100)
    a = p.parse_args()
    torch.manual_seed(2)
    dtype = torch.float16 if a.dtype == "fp16" else torch.float32
    hidden = a.head_num * a.head_size
    avg = a.avg_seqlen if a.avg_seqlen > 0 else a.seqlen
    low, high = (2 * avg - a.seqlen, a.seqlen + 1) if 2 * avg > a.seqlen else (0, 2 * avg + 1)
    lengths = torch.randint(low, high, (a.batch_size,))
    keep = (torch.arange(a.seqlen)[None, :] < lengths[:, None]).to("cuda", dtype)   # (B, S)
    bias = (-10000.0 * (1.0 - keep))[:, None, None, :]                                 # (B, 1, 1, S)

    def weight(*shape: int) -> torch.Tensor:
        return torch.empty(*shape).uniform_(-0.4, 0.4).to("cuda", dtype)

    layers = [dict(qkv=weight(hidden, 3 * hidden), qkv_b=weight(3 * hidden), out=weight(hidden, hidden),
                   out_b=weight(hidden), ln1_g=weight(hidden), ln1_b=weight(hidden), up=weight(hidden, 4 * hidden),
                   up_b=weight(4 * hidden), down=weight(4 * hidden, hidden), down_b=weight(hidden),
                   ln2_g=weight(hidden), ln2_b=weight(hidden)) for _ in range(a.n_layers)]
    x0 = weight(a.batch_size, a.seqlen, hidden)

    def heads(t: torch.Tensor) -> torch.Tensor:
        return t.view(a.batch_size, a.seqlen, a.head_num, a.head_size).permute(0, 2, 1, 3)

    def encoder(x: torch.Tensor) -> torch.Tensor:
        for w in layers:
            q, k, v = (x @ w["qkv"] + w["qkv_b"]).chunk(3, dim=-1)
            scores = heads(q) @ heads(k).transpose(-2, -1) / a.head_size ** 0.5 + bias
            ctx = (F.softmax(scores, dim=-1) @ heads(v)).permute(0, 2, 1, 3).reshape(a.batch_size, a.seqlen, hidden)
            x = F.layer_norm(ctx @ w["out"] + w["out_b"] + x, (hidden,), w["ln1_g"], w["ln1_b"])
            h = F.gelu(x @ w["up"] + w["up_b"]) @ w["down"] + w["down_b"]
            x = F.layer_norm(h + x, (hidden,), w["ln2_g"], w["ln2_b"])
        return x

    with torch.no_grad():
        for i in range(5 + a.iters):
            if i == 5:
                torch.cuda.synchronize()
                t0 = timeit.default_timer()
            encoder(x0)
        torch.cuda.synchronize()
        t1 = timeit.default_timer()
    print(f"time costs:    {(t1 - t0) * 1000 / a.iters:.2f} ms")


if __name__ == "__main__":
    main()
