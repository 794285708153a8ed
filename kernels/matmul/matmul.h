// The kernels' interface, included by the .cu files and binding.cpp so that they cannot disagree.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

// c (m x n) = a (m x k) @ b (k x n), all row-major, fp32 accumulation; each returns the launch's error.
// Shared-memory tiles and FMA on the CUDA cores: the version to read first.
cudaError_t launch_matmul_tiled(const __half* a, const __half* b, __half* c, int m, int n, int k, cudaStream_t stream);
cudaError_t launch_matmul_tiled(const __nv_bfloat16* a, const __nv_bfloat16* b, __nv_bfloat16* c, int m, int n, int k,
                                cudaStream_t stream);
// Tensor cores (mma.sync) fed by a 3-stage cp.async pipeline, 256x128 tiles.
cudaError_t launch_matmul_tensorcore(const __half* a, const __half* b, __half* c, int m, int n, int k,
                                     cudaStream_t stream);
cudaError_t launch_matmul_tensorcore(const __nv_bfloat16* a, const __nv_bfloat16* b, __nv_bfloat16* c, int m, int n,
                                     int k, cudaStream_t stream);
// Hopper (sm_90a): TMA, an mbarrier pipeline and wgmma, 128x256 tiles, one producer and two consumer
// warpgroups. Shapes TMA cannot read (k or n not a multiple of 8, unaligned pointers) run the
// tensor-core version instead.
cudaError_t launch_matmul_wgmma(const __half* a, const __half* b, __half* c, int m, int n, int k, cudaStream_t stream);
cudaError_t launch_matmul_wgmma(const __nv_bfloat16* a, const __nv_bfloat16* b, __nv_bfloat16* c, int m, int n, int k,
                                cudaStream_t stream);
