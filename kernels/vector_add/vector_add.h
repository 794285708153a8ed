// The kernel's interface, included by both vector_add.cu and binding.cpp so that they cannot disagree.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

// c = a + b over n elements; returns the launch's error.
cudaError_t launch_vector_add(const float* a, const float* b, float* c, int64_t n, cudaStream_t stream);
cudaError_t launch_vector_add(const __half* a, const __half* b, __half* c, int64_t n, cudaStream_t stream);
cudaError_t launch_vector_add(const __nv_bfloat16* a, const __nv_bfloat16* b, __nv_bfloat16* c, int64_t n,
                              cudaStream_t stream);
