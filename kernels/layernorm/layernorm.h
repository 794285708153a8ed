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

// The backward: grad_x, grad_w and grad_b of y = layernorm(x, w, b) given dy = grad_out, the row statistics
// recomputed from x. `workspace`: layernorm_backward_workspace(...) floats (partial sums of grad_w and grad_b).
#define KL_LAYERNORM_BACKWARD_DECL(T)                                                                             \
  int64_t layernorm_backward_workspace(const T* dy, const T* x, const T* w, const T* dx, const T* dw, const T* db, \
                                       int64_t rows, int64_t cols);                                              \
  cudaError_t launch_layernorm_backward(const T* dy, const T* x, const T* w, T* dx, T* dw, T* db, float* workspace, \
                                        int64_t rows, int64_t cols, float eps, cudaStream_t stream);
KL_LAYERNORM_BACKWARD_DECL(float)
KL_LAYERNORM_BACKWARD_DECL(__half)
KL_LAYERNORM_BACKWARD_DECL(__nv_bfloat16)
#undef KL_LAYERNORM_BACKWARD_DECL
