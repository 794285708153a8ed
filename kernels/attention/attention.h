// The kernel's interface, included by both attention.cu and binding.cpp so that they cannot disagree.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

// o = softmax(q k^T / sqrt(d), keys j >= lengths[b] masked) v, for q, k, v, o of shape
// (batch, heads, seq, d) contiguous and lengths (batch,) int32 on the device; d is 64 or 128.
// Masked keys get no weight, but, as in the reference and SDPA, their values must be finite: the wgmma
// kernel multiplies the padding rows of v in the last key block by 0, and 0 * NaN is NaN. (The mma.sync
// kernel does not read values past lengths[b].)
cudaError_t launch_attention(const __half* q, const __half* k, const __half* v, const int* lengths, __half* o,
                             int batch, int heads, int seq, int d, cudaStream_t stream);
cudaError_t launch_attention(const __nv_bfloat16* q, const __nv_bfloat16* k, const __nv_bfloat16* v,
                             const int* lengths, __nv_bfloat16* o, int batch, int heads, int seq, int d,
                             cudaStream_t stream);
// The same on Hopper's own path (attention_wgmma.cu: TMA, mbarriers, wgmma), for compute capability 9.0
// only; cudaErrorNotSupported when the driver cannot encode its tensor maps.
cudaError_t launch_attention_wgmma(const __half* q, const __half* k, const __half* v, const int* lengths, __half* o,
                                   int batch, int heads, int seq, int d, cudaStream_t stream);
cudaError_t launch_attention_wgmma(const __nv_bfloat16* q, const __nv_bfloat16* k, const __nv_bfloat16* v,
                                   const int* lengths, __nv_bfloat16* o, int batch, int heads, int seq, int d,
                                   cudaStream_t stream);
