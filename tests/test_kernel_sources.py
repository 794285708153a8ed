"""Every CUDA op's kernels compile on a machine without a GPU or a CUDA build of torch: the `.cu` files
include no torch headers, so the machine's own nvcc builds them with torch's nvcc defines (half
operators off) for sm_80 and for each arch-specific variant an op requires (sm_90a for the wgmma matmul and attention).
This is the check CI can make of kernel code it cannot run; the GPU machine runs them (test_kernels.py).
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor

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


def archs_of(op) -> list[str]:
    return ["8.0", *sorted(set(op.requires.values()))]


@pytest.fixture(scope="module")
def compiled(request, tmp_path_factory) -> dict[str, list[tuple[str, subprocess.CompletedProcess]]]:
    """op name -> (source file, nvcc's result) for each of its .cu files: the sources of every op this run selected
    (all but vector_add's are in the full tier: tests/conftest.py's FULL_VARIANTS) compiled at once, one nvcc a core.
    One after another, layernorm's, rmsnorm's and softmax's took about 90 s on a slow 2-core machine; at once, 58 s."""
    selected = {item.callspec.params["op"].name for item in request.session.items
                if getattr(item, "originalname", "") == "test_every_cuda_source_compiles_without_a_gpu"}
    out = tmp_path_factory.mktemp("objects")
    jobs = []
    for op in (op for op in CUDA_OPS if op.name in selected):
        for i, source in enumerate(sorted(op.path.glob("*.cu"))):
            argv = [NVCC, "-std=c++17", *CUDA_FLAGS, *COMMON_NVCC_FLAGS, *map(gencode, archs_of(op)),
                    f"-I{op.path.parent / '_common'}", f"-I{op.path}", "-c", str(source),
                    "-o", str(out / f"{op.name}-{i}.o")]
            jobs.append((op.name, source.name, argv))
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        runs = [pool.submit(subprocess.run, argv, capture_output=True, text=True) for _, _, argv in jobs]
        results: dict[str, list[tuple[str, subprocess.CompletedProcess]]] = {}
        for (name, source, _), run in zip(jobs, runs):
            results.setdefault(name, []).append((source, run.result()))
    return results


@pytest.mark.parametrize("op", CUDA_OPS, ids=[op.name for op in CUDA_OPS])
def test_every_cuda_source_compiles_without_a_gpu(op, compiled):
    archs = archs_of(op)
    assert op.name in compiled, f"{op.name}: a CUDA op without a .cu file"
    for source, done in compiled[op.name]:
        assert done.returncode == 0, f"{source} for {', '.join(archs)}:\n{done.stderr[-3000:]}"
        assert " spill stores" in done.stdout + done.stderr, "ptxas -v reported nothing: no device code compiled"
        if source == "matmul_wgmma.cu":
            # Its setmaxnreg counts (40 and 232) split exactly 168 registers x 384 threads; another count
            # from ptxas would leave a warpgroup waiting for registers that never come.
            entries = (done.stdout + done.stderr).split("Compiling entry function")
            used = [int(m.group(1)) for e in entries if "matmul_wgmma_kernel" in e and "for 'sm_90a'" in e
                    if (m := re.search(r"Used (\d+) registers", e))]
            assert used == [168, 168], used  # fp16 and bf16
