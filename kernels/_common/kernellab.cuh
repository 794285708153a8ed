// Device helpers shared by the kernels (.cu). No torch headers here: a .cu that includes only this
// compiles in seconds, which is what keeps the edit-rebuild-test loop short.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>  // std::max/std::min on the host side (older libstdc++ does not bring it in through <cstdint>)
#include <atomic>
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

// The current device as an index into the per-device caches (DeviceCache), or -1 past their slots: such a device is
// asked every time (before, devices past the last slot shared it, and read each other's answers).
constexpr int kCacheSlots = 64;
inline int cache_slot() {
  int device = 0;
  cudaGetDevice(&device);
  return device < kCacheSlots ? device : -1;
}

// One int per device that any host thread may read or write: 0 until known. Only as a static (zero-initialised).
// The answers hold for the process's CUDA context: a process that resets a device (cudaDeviceReset) would keep them,
// as PyTorch's own state does not survive that either.
struct DeviceCache {
  std::atomic<int> slots[kCacheSlots];

  int get() const {
    const int slot = cache_slot();
    return slot < 0 ? 0 : slots[slot].load(std::memory_order_acquire);
  }
  void set(int value) {
    const int slot = cache_slot();
    if (slot >= 0) slots[slot].store(value, std::memory_order_release);
  }
};

// A yes or no about the current device, asked once per device through `cache` (a static): ask() says 1 yes, 0 no, or
// -1 when the runtime could not say, which reads as no this time and is asked again next time (never cached).
template <typename Ask>
inline bool cached_yes(DeviceCache& cache, Ask&& ask) {
  if (const int known = cache.get(); known != 0) return known == 1;  // 1 yes, 2 no
  const int answer = ask();
  if (answer < 0) return false;
  cache.set(answer > 0 ? 1 : 2);
  return answer > 0;
}

// An attribute of the current device, cached per device: the query costs microseconds.
template <cudaDeviceAttr A>
inline int device_attribute() {
  static DeviceCache cache;
  if (const int known = cache.get(); known != 0) return known;
  int device = 0, value = 0;
  cudaGetDevice(&device);
  cudaDeviceGetAttribute(&value, A, device);
  cache.set(value);
  return value;
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
