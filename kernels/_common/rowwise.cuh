// Row-wise kernels (softmax, layernorm): one block per row, each thread owning the packs
// threadIdx.x, threadIdx.x + blockDim.x, ... When a thread's packs fit in registers (CACHE of them)
// the row is read once; longer rows are streamed twice (the second read mostly hits L2).
#pragma once

#include <cstdint>
#include <type_traits>

namespace kl {

constexpr int kRowMaxThreads = 1024;

struct RowPlan {
  int pack;     // elements per access: 16 bytes' worth, or 1 when the rows are not 16-byte aligned
  int threads;  // per block, a multiple of 32
  int cache;    // packs per thread kept in registers (1, 2, 4), or 0 to stream
};

inline RowPlan plan_rows(int64_t cols, int pack16, bool aligned) {
  const int pack = (aligned && cols % pack16 == 0) ? pack16 : 1;
  const int64_t packs = cols / pack;
  // Grow the block until each thread holds at most 4 packs: enough loads in flight, small blocks.
  int threads = 32;
  while (threads < kRowMaxThreads && packs > 4LL * threads) threads *= 2;
  const int64_t per_thread = (packs + threads - 1) / threads;
  // More than 4 packs per thread at 1024 threads would spill (64 registers per thread): stream instead.
  int cache = per_thread <= 1 ? 1 : per_thread <= 2 ? 2 : per_thread <= 4 ? 4 : 0;
  if (pack == 1) cache = 0;  // the unaligned fallback only streams: fewer kernels to compile
  return {pack, threads, cache};
}

// Calls f(std::integral_constant<int, cache>{}) so that the cache size is a compile-time constant.
template <typename F>
void dispatch_cache(int cache, F&& f) {
  switch (cache) {
    case 1: f(std::integral_constant<int, 1>{}); break;
    case 2: f(std::integral_constant<int, 2>{}); break;
    case 4: f(std::integral_constant<int, 4>{}); break;
    default: f(std::integral_constant<int, 0>{});
  }
}

// This thread's packs of one row: threadIdx.x, threadIdx.x + blockDim.x, ... With CACHE > 0 they
// are loaded into registers once, every load issued before the first use; with CACHE == 0 each
// pass over them reads memory again.
template <typename P, int CACHE>
struct RowPacks {
  const P* in;
  int packs;
  P cache[CACHE > 0 ? CACHE : 1];

  __device__ __forceinline__ RowPacks(const P* row, int count) : in(row), packs(count) {
    if constexpr (CACHE > 0) {
#pragma unroll
      for (int i = 0; i < CACHE; ++i) {
        const int k = threadIdx.x + i * blockDim.x;
        if (k < packs) cache[i] = in[k];
      }
    }
  }

  // Calls f(pack, k) for each of this thread's packs, k being the pack's index in the row.
  template <typename F>
  __device__ __forceinline__ void for_each(F&& f) const {
    if constexpr (CACHE > 0) {
#pragma unroll
      for (int i = 0; i < CACHE; ++i) {
        const int k = threadIdx.x + i * blockDim.x;
        if (k < packs) f(cache[i], k);
      }
    } else {
      for (int k = threadIdx.x; k < packs; k += blockDim.x) f(in[k], k);
    }
  }
};

}  // namespace kl
