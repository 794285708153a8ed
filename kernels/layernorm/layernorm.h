// The kernel's interface, included by both layernorm.cu and binding.cpp so that they cannot disagree.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

// y[r, :] = (x[r, :] - mean) / sqrt(var + eps) * w + b over contiguous rows x cols (biased variance).
cudaError_t launch_layernorm(const float* x, const float* w, const float* b, float* y, int64_t rows, int64_t cols,
                             float eps, cudaStream_t stream);
cudaError_t launch_layernorm(const __half* x, const __half* w, const __half* b, __half* y, int64_t rows, int64_t cols,
                             float eps, cudaStream_t stream);
cudaError_t launch_layernorm(const __nv_bfloat16* x, const __nv_bfloat16* w, const __nv_bfloat16* b, __nv_bfloat16* y,
                             int64_t rows, int64_t cols, float eps, cudaStream_t stream);
