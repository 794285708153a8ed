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

// The current device, as an index into the per-device caches below (64 slots; devices past them share the last).
inline int cache_slot() {
  int device = 0;
  cudaGetDevice(&device);
  return device < 64 ? device : 63;
}

// An attribute of the current device, cached per device: the query costs microseconds.
template <cudaDeviceAttr A>
inline int device_attribute() {
  static int cached[64] = {};
  const int slot = cache_slot();
  if (cached[slot] == 0) {
    int device = 0;
    cudaGetDevice(&device);
    cudaDeviceGetAttribute(&cached[slot], A, device);
  }
  return cached[slot];
}

// Multiprocessor count of the current device.
inline int sm_count() { return device_attribute<cudaDevAttrMultiProcessorCount>(); }

// Compute capability's major number of the current device (9 for Hopper).
inline int compute_major() { return device_attribute<cudaDevAttrComputeCapabilityMajor>(); }

// Reductions over a row's group of threads (a warp or less up to a whole block), of a float or of several
// statistics at once (a mean/variance, a max/sum pair): kl::group_combine in rowwise.cuh.
__device__ __forceinline__ float shfl_xor(float v, int mask) { return __shfl_xor_sync(0xffffffffu, v, mask); }

__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

constexpr float kLog2e = 1.4426950408889634f;

}  // namespace kl
