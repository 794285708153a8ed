// The kernel's interface, included by both softmax.cu and binding.cpp so that they cannot disagree.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

// y[r, :] = softmax(x[r, :]) for contiguous rows x cols; returns the launch's error.
cudaError_t launch_softmax(const float* x, float* y, int64_t rows, int64_t cols, cudaStream_t stream);
cudaError_t launch_softmax(const __half* x, __half* y, int64_t rows, int64_t cols, cudaStream_t stream);
cudaError_t launch_softmax(const __nv_bfloat16* x, __nv_bfloat16* y, int64_t rows, int64_t cols, cudaStream_t stream);

// The backward from the forward's output y: dx[r, :] = y[r, :] * (dy[r, :] - sum(dy[r, :] * y[r, :])).
cudaError_t launch_softmax_backward(const float* dy, const float* y, float* dx, int64_t rows, int64_t cols,
                                    cudaStream_t stream);
cudaError_t launch_softmax_backward(const __half* dy, const __half* y, __half* dx, int64_t rows, int64_t cols,
                                    cudaStream_t stream);
cudaError_t launch_softmax_backward(const __nv_bfloat16* dy, const __nv_bfloat16* y, __nv_bfloat16* dx, int64_t rows,
                                    int64_t cols, cudaStream_t stream);
