// Device helpers shared by the kernels (.cu). No torch headers here: a .cu that includes only this
// compiles in seconds, which is what keeps the edit-rebuild-test loop short.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>  // std::max/std::min on the host side (older libstdc++ does not bring it in through <cstdint>)
#include <cstdint>

namespace kl {

// Conversions through float. torch compiles .cu files with __CUDA_NO_HALF_OPERATORS__, so half
// arithmetic goes through these rather than operators.
__device__ __forceinline__ float to_float(float x) { return x; }
__device__ __forceinline__ float to_float(__half x) { return __half2float(x); }
__device__ __forceinline__ float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }

template <typename T>
__device__ __forceinline__ T from_float(float x);
template <>
__device__ __forceinline__ float from_float<float>(float x) { return x; }
template <>
__device__ __forceinline__ __half from_float<__half>(float x) { return __float2half_rn(x); }
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }

// N elements moved as one access: with N * sizeof(T) == 16 a copy is a single 128-bit load or store.
template <typename T, int N>
struct alignas(sizeof(T) * N) Pack {
  T v[N];
};

template <typename T>
constexpr int kPack16 = 16 / sizeof(T);  // elements per 16-byte access

inline bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// Multiprocessor count of the current device, cached: the attribute query costs microseconds.
inline int sm_count() {
  static int cached[64] = {};
  int device = 0;
  cudaGetDevice(&device);
  if (device >= 64) device = 63;
  if (cached[device] == 0) cudaDeviceGetAttribute(&cached[device], cudaDevAttrMultiProcessorCount, device);
  return cached[device];
}

// Reductions over a "state" S: S{} is the identity, S::combine(a, b) is associative, s.shfl_xor(m)
// exchanges a state between lanes. The same code then reduces a max/sum pair or mean/variance.
template <typename S>
__device__ __forceinline__ S warp_reduce(S s) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) s = S::combine(s, s.shfl_xor(offset));
  return s;
}

// Every thread gets the whole block's state. blockDim.x must be a multiple of 32.
template <typename S>
__device__ __forceinline__ S block_reduce(S s) {
  // Raw storage: a __shared__ array of a type with default member initializers is not allowed.
  __shared__ alignas(S) unsigned char storage[32 * sizeof(S)];
  S* partial = reinterpret_cast<S*>(storage);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  s = warp_reduce(s);
  __syncthreads();  // a previous call's readers are done with `partial`
  if (lane == 0) partial[warp] = s;
  __syncthreads();
  // Each warp reduces the partials itself: no second round through shared memory.
  return warp_reduce(lane < warps ? partial[lane] : S{});
}

__device__ __forceinline__ float shfl_xor(float v, int mask) { return __shfl_xor_sync(0xffffffffu, v, mask); }

__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

constexpr float kLog2e = 1.4426950408889634f;

}  // namespace kl
