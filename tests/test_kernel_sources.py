"""Every CUDA op's kernels compile on a machine without a GPU or a CUDA build of torch: the `.cu` files
include no torch headers, so the machine's own nvcc builds them with torch's nvcc defines (half
operators off) for sm_80 and for each arch-specific variant an op requires (sm_90a for the wgmma matmul and attention).
This is the check CI can make of kernel code it cannot run; the GPU machine runs them (test_kernels.py).
"""
from __future__ import annotations

import re
import shutil
import subprocess

import pytest
from torch.utils.cpp_extension import COMMON_NVCC_FLAGS  # what every extension build adds; CPU builds have it too

from kernellab.ops import spec
from kernellab.ops.extensions import CUDA_FLAGS

NVCC = shutil.which("nvcc")
pytestmark = pytest.mark.skipif(NVCC is None, reason="no nvcc on this machine")

CUDA_OPS = [op for op in spec.discover() if op.kind == "cuda"]


def gencode(arch: str) -> str:
    n = arch.replace(".", "")
    return f"-gencode=arch=compute_{n},code=sm_{n}"


@pytest.mark.parametrize("op", CUDA_OPS, ids=[op.name for op in CUDA_OPS])
def test_every_cuda_source_compiles_without_a_gpu(op, tmp_path):
    archs = ["8.0", *sorted(set(op.requires.values()))]
    sources = sorted(op.path.glob("*.cu"))
    assert sources, f"{op.name}: a CUDA op without a .cu file"
    for source in sources:
        argv = [NVCC, "-std=c++17", *CUDA_FLAGS, *COMMON_NVCC_FLAGS, *map(gencode, archs),
                f"-I{op.path.parent / '_common'}", f"-I{op.path}", "-c", str(source), "-o", str(tmp_path / "k.o")]
        done = subprocess.run(argv, capture_output=True, text=True)
        assert done.returncode == 0, f"{source.name} for {', '.join(archs)}:\n{done.stderr[-3000:]}"
        assert " spill stores" in done.stdout + done.stderr, "ptxas -v reported nothing: no device code compiled"
        if source.name == "matmul_wgmma.cu":
            # Its setmaxnreg counts (40 and 232) split exactly 168 registers x 384 threads; another count
            # from ptxas would leave a warpgroup waiting for registers that never come.
            entries = (done.stdout + done.stderr).split("Compiling entry function")
            used = [int(m.group(1)) for e in entries if "matmul_wgmma_kernel" in e and "for 'sm_90a'" in e
                    if (m := re.search(r"Used (\d+) registers", e))]
            assert used == [168, 168], used  # fp16 and bf16
