// The kernel's interface, included by both rmsnorm.cu and binding.cpp so that they cannot disagree.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

// y[r, :] = x[r, :] / sqrt(mean(x[r, :]^2) + eps) * w over contiguous rows x cols, accumulated in float32,
// written in the input's dtype.
cudaError_t launch_rmsnorm(const float* x, const float* w, float* y, int64_t rows, int64_t cols, float eps,
                           cudaStream_t stream);
cudaError_t launch_rmsnorm(const __half* x, const __half* w, __half* y, int64_t rows, int64_t cols, float eps,
                           cudaStream_t stream);
cudaError_t launch_rmsnorm(const __nv_bfloat16* x, const __nv_bfloat16* w, __nv_bfloat16* y, int64_t rows,
                           int64_t cols, float eps, cudaStream_t stream);

// The backward: grad_x and grad_w of y = rmsnorm(x, w) given dy = grad_out, rstd recomputed from x.
// `workspace`: rmsnorm_backward_workspace(...) floats (partial sums of grad_w).
#define KL_RMSNORM_BACKWARD_DECL(T)                                                                              \
  int64_t rmsnorm_backward_workspace(const T* dy, const T* x, const T* w, const T* dx, const T* dw, int64_t rows, \
                                     int64_t cols);                                                              \
  cudaError_t launch_rmsnorm_backward(const T* dy, const T* x, const T* w, T* dx, T* dw, float* workspace,       \
                                      int64_t rows, int64_t cols, float eps, cudaStream_t stream);
KL_RMSNORM_BACKWARD_DECL(float)
KL_RMSNORM_BACKWARD_DECL(__half)
KL_RMSNORM_BACKWARD_DECL(__nv_bfloat16)
#undef KL_RMSNORM_BACKWARD_DECL
