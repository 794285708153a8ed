"""Row softmax in Triton: one program per row, the whole row in registers.

The Triton path needs no build step: the kernel is compiled at its first call (and cached by
Triton under $TRITON_CACHE_DIR). Compare with ../softmax/softmax.cu, which does the same in CUDA.
"""
import torch
import triton
import triton.language as tl

MAX_COLS = 65536  # one row must fit in one program's registers
DTYPES = (torch.float32, torch.float16, torch.bfloat16)


@triton.jit
def _softmax_rows(x_ptr, y_ptr, cols, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    offsets = tl.arange(0, BLOCK)
    inside = offsets < cols
    x = tl.load(x_ptr + row * cols + offsets, mask=inside, other=-float("inf")).to(tl.float32)
    e = tl.exp(x - tl.max(x, axis=0))
    tl.store(y_ptr + row * cols + offsets, (e / tl.sum(e, axis=0)).to(y_ptr.dtype.element_ty), mask=inside)


def _check(name: str, t: torch.Tensor) -> None:
    if not t.is_cuda:
        raise ValueError(f"softmax_triton: {name} must be on a CUDA device, got {t.device}")
    if t.dtype not in DTYPES:
        raise TypeError(f"softmax_triton: {name} has dtype {t.dtype}; expected one of {DTYPES}")
    if not t.is_contiguous():
        raise ValueError(f"softmax_triton: {name} must be contiguous (call .contiguous() on it first)")


def softmax(x: torch.Tensor, out: torch.Tensor) -> None:
    """out[r, :] = softmax(x[r, :]) for a contiguous 2-D x."""
    _check("x", x)
    if x.dim() != 2:
        raise ValueError(f"softmax_triton: x must have 2 dimensions, got shape {list(x.shape)}")
    _check("out", out)
    if out.shape != x.shape or out.dtype != x.dtype or out.device != x.device:
        raise ValueError(f"softmax_triton: out has shape {list(out.shape)}, dtype {out.dtype} on {out.device}; "
                         f"it must match x: {list(x.shape)}, {x.dtype} on {x.device}")
    rows, cols = x.shape
    if cols > MAX_COLS:
        raise ValueError(f"softmax_triton: at most {MAX_COLS} columns, got {cols}")
    block = max(32, triton.next_power_of_2(cols))  # at least one element per lane of a warp
    warps = 4 if block <= 2048 else 8 if block <= 8192 else 16
    with torch.cuda.device(x.device):
        _softmax_rows[(rows,)](x, out, cols, BLOCK=block, num_warps=warps)
