// Row-wise kernels (softmax, layernorm, rmsnorm): a group of threads per row (a power of two, 1 to
// 1024), several rows per block when the groups are small (forwards: as few as keep an SM as full, fit_block).
// Each thread keeps its packs of the row (threadIdx.x's lane in the group, + group, + 2 * group, ...) in
// registers, every load issued before the first use, so the row is read from memory once; statistics are
// reduced over the group with warp shuffles, through shared memory only when the group spans warps. Rows
// longer than registers hold (kRowMaxPacks packs per thread at 1024 threads) are streamed: each pass reads
// them again (mostly from L2).
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <tuple>
#include <type_traits>

#include "kernellab.cuh"
#include "mma.cuh"  // cp_async16 (staged rows: BackwardRows)

namespace kl {

constexpr int kRowMaxThreads = 1024;  // threads per row, at most (one block)
constexpr int kRowMaxPacks = 8;       // packs per thread kept in registers, at most

// A kernel keeping PER packs of N elements per thread is launched with at most this many threads per
// block: 1024 (64 registers a thread) up to 16 elements, else 512 (and so 128 registers).
template <int N, int PER>
constexpr int row_block_limit() {
  return N * PER > 16 ? kRowMaxThreads / 2 : kRowMaxThreads;
}
constexpr int kRowBlockThreads = 256;  // threads per block when several rows share it
// Few rows (decoding) are spread over up to this many threads each: on the H100, 4 rows of 8192 took
// 38.1 us over six cases with 512, 40.9 us with 1024 and 42.8 us with 256.
constexpr int kRowSpreadThreads = 512;
// Splitting such a row over a thread-block cluster (sm_90: 2 to 16 blocks on as many SMs, the reduction through
// distributed shared memory) was tried and left out: 4 rows of 8192 float32, layernorm's forward kernel took
// 3.25 us alone and 3.87-3.97 us in clusters of 2 to 8, rmsnorm's and softmax's likewise; the loads of one SM
// are not what limits a handful of rows (H100, 2026-11-28).

struct RowPlan {
  int pack = 1;            // elements per access: 16 bytes' worth, or 1 when the rows are not 16-byte aligned
  int group = 1;           // threads per row, a power of two
  int shift = 0;           // log2(group)
  int per_thread = 1;      // packs per thread in registers (1, 2, 4, 8), or 0 to stream
  int rows_per_block = 1;  // block = group * rows_per_block threads, a multiple of 32
  int64_t blocks = 0;
  bool few = false;        // fewer blocks than SMs (a handful of rows: decoding); fit_block splits none of them

  int threads() const { return group * rows_per_block; }
};

// rows x cols, pack16 = elements per 16 bytes. `aligned`: every pointer the kernel touches starts on 16 bytes.
// A thread keeps at most max_elems elements of a row in registers (max_elems / 2 in a group of 1024 threads);
// a row needing more is streamed by 1024 threads.
inline RowPlan plan_rows(int64_t rows, int64_t cols, int pack16, bool aligned, int sms, int max_elems = 32) {
  const int block_threads = kRowBlockThreads, spread_to = kRowSpreadThreads;
  RowPlan p;
  p.pack = (aligned && cols % pack16 == 0) ? pack16 : 1;
  const int64_t packs = cols / p.pack;
  const int max_packs = std::max(1, std::min(kRowMaxPacks, max_elems / p.pack));
  // The smallest group whose threads hold the row in at most max_packs packs each: few threads per row
  // means short reductions, and several 16-byte loads in flight per thread keep the memory system busy.
  while (p.group < kRowMaxThreads / 2 && packs > int64_t(max_packs) * p.group) p.group *= 2;
  if (packs > int64_t(max_packs) * p.group) p.group = kRowMaxThreads;
  const int64_t per = (packs + p.group - 1) / p.group;
  const int allowed = p.group == kRowMaxThreads ? std::max(1, max_packs / 2) : max_packs;
  p.per_thread = per > allowed ? 0 : per <= 1 ? 1 : per <= 2 ? 2 : per <= 4 ? 4 : 8;
  // Few rows (decoding): spread each row over more threads, and so more SMs' loads, until the GPU has
  // a few blocks' worth of threads per SM.
  while (p.per_thread > 1 && p.group < spread_to && rows * p.group < int64_t(sms) * 512) {
    p.group *= 2;
    p.per_thread /= 2;
  }
  while ((1 << p.shift) < p.group) ++p.shift;
  // Several rows per block when a row's group is small; a block is always whole warps.
  p.rows_per_block = p.group >= block_threads ? 1 : block_threads / p.group;
  // Do not leave SMs idle for want of blocks (but keep whole warps).
  while (p.rows_per_block > 1 && p.rows_per_block * p.group > 32 && (rows + p.rows_per_block - 1) / p.rows_per_block < sms) {
    p.rows_per_block /= 2;
  }
  p.blocks = (rows + p.rows_per_block - 1) / p.rows_per_block;
  p.few = p.blocks < sms;
  return p;
}

// The plan of max_elems elements a thread (plan_rows) when it spreads the rows evenly, every thread of a row's group
// holding as many packs, over at most max_group threads; else none.
inline std::optional<RowPlan> plan_even_rows(int64_t rows, int64_t cols, int pack16, bool aligned, int sms,
                                             int max_elems, int max_group) {
  const RowPlan p = plan_rows(rows, cols, pack16, aligned, sms, max_elems);
  if (p.per_thread > 0 && p.group <= max_group && (cols / p.pack) % p.group == 0) return p;
  return std::nullopt;
}

// A norm forward's plan (rows of T, 16-byte packs where aligned). float32 rows that at most kNormEvenGroup threads
// hold evenly at kNormEvenElems elements a thread get that plan rather than plan_rows's 32 elements a thread: the
// weight (and bias) is then loaded into registers up front with the row (RowVector, 2 packs or fewer), not after the
// row's reduction where it is used, and a thread needs fewer registers (layernorm 48 instead of 64, rmsnorm 32
// instead of 62). Kernel times, H200, layernorm / rmsnorm float32, 16384 rows: 256 columns 10.8 -> 10.4 / 10.8 ->
// 10.5 us, 512 19.6 -> 18.5 / 18.9 -> 18.5, 1024 35.1 -> 34.4 / 34.4 -> 33.9. Not unevenly (768 columns: 128
// threads, half of them holding one pack and half two, 27.2 -> 28.6 us), nor in larger groups (1536 columns, 256
// threads: 50.7 -> 57.5 us; 4096, 512 threads: 35.2 -> 44.7), whose reductions cross more warps; nor for 2-byte
// types, whose 32 elements are 4 packs (40 to 61 registers).
constexpr int kNormEvenElems = 8, kNormEvenGroup = 128;

template <typename T>
inline RowPlan plan_norm_forward(int64_t rows, int64_t cols, bool aligned, int sms) {
  if constexpr (sizeof(T) == 4) {
    if (const auto p = plan_even_rows(rows, cols, kPack16<T>, aligned, sms, kNormEvenElems, kNormEvenGroup)) return *p;
  }
  return plan_rows(rows, cols, kPack16<T>, aligned, sms);
}

// The CUDA runtime's answers a launch needs (occupancy, shared memory), asked once per kernel and device: the
// forwards' fitted blocks (fit_block) and the norm backwards' grids and staging. A layernorm backward call made three
// occupancy queries, a function-attribute query and up to three attribute sets, and took 17.4 us of host time against
// its forward's 9.2 (4x8192 float16, H200; results/h200-timeline-norms). Asked once, the binding's host time went 10.8
// -> 10.6 us there, 13.0 -> 11.1 at 16384x1024 (rmsnorm 10.9 -> 10.1, 12.6 -> 10.7; the least of two rounds, a noisy
// host).

// Kernel's static shared memory in bytes, or -1 when the runtime cannot say (its error cleared; asked again next
// time). Kernel is first allowed as much dynamic shared memory as the device lets a block have beside that (past the
// default 48 KB: column sums in shared memory up to 64 KB, staged rows, BackwardRows, up to 128 KB). The allowance is a
// limit, not a reservation (an SM holds blocks by each launch's own bytes), so at its largest it serves every launch
// shape, and two threads that first meet a kernel at once set the same value.
template <auto Kernel>
inline int prepare_kernel() {
  static DeviceCache cache;  // static bytes + 1
  if (const int known = cache.get(); known > 0) return known - 1;
  cudaFuncAttributes a{};
  if (cudaFuncGetAttributes(&a, Kernel) != cudaSuccess) {
    cudaGetLastError();
    return -1;
  }
  const int most = device_attribute<cudaDevAttrMaxSharedMemoryPerBlockOptin>() - static_cast<int>(a.sharedSizeBytes);
  if (cudaFuncSetAttribute(Kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, most) != cudaSuccess) {
    cudaGetLastError();
    return -1;
  }
  cache.set(static_cast<int>(a.sharedSizeBytes) + 1);  // after the set: a thread that reads it launches after it
  return static_cast<int>(a.sharedSizeBytes);
}

// Blocks of Kernel an SM holds at once in blocks of `threads` with `smem` bytes of dynamic shared memory (the occupancy
// calculator: registers, shared memory, the SM's limit of 32 blocks; after prepare_kernel where smem > 0), cached per
// kernel, device and launch shape (an entry per width a program uses, where the bytes follow the width); -1 when it
// fails (its error cleared, not cached; every launcher here returns its launch's error at once, so none older is
// pending).
template <auto Kernel>
inline int blocks_per_sm(int threads, size_t smem) {
  static std::mutex mutex;
  static std::map<std::tuple<int, int, size_t>, int> cached;
  const int slot = cache_slot();
  const std::tuple<int, int, size_t> key{slot, threads, smem};
  if (slot >= 0) {
    const std::lock_guard<std::mutex> lock(mutex);
    if (const auto it = cached.find(key); it != cached.end()) return it->second;
  }
  int blocks = 0;
  if ((smem > 0 && prepare_kernel<Kernel>() < 0) ||
      cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, Kernel, threads, smem) != cudaSuccess) {
    cudaGetLastError();
    return -1;
  }
  if (slot >= 0) {
    const std::lock_guard<std::mutex> lock(mutex);
    cached.emplace(key, blocks);
  }
  return blocks;
}

// A forward's plan with its blocks fitted to the kernel that runs it: fewer rows per block, down to one warp,
// as long as an SM still holds as many of the kernel's threads. A block's threads return to the SM only when
// all its rows are done, so with several rows per block the SM waits on each block's slowest; with one row a
// block, the next row starts as soon as one ends. At 64 registers a thread (float32, 32 elements) that is one
// warp a block; at 40 (float16) two, where one would meet the SM's limit of 32 blocks first. Nsight Compute
// against Liger-Kernel had shown it (H200, layernorm 16384x1024 float32: 8-row blocks 41% of warps active;
// torch.compile's one-warp blocks were 11% faster). Kernel times, 256-thread blocks -> fitted (H200,
// benchmarks/kernel_ab.py): 16384x1024 layernorm float32 36.2 -> 35.5 us, float16 19.9 -> 19.3; rmsnorm 35.3 ->
// 34.5, bfloat16 20.0 -> 19.2; softmax 34.9 -> 33.9, float16 19.1 -> 18.5; 4096x4096 0.4-1.7% less; wider rows,
// one row a block already, unchanged. (Not for backwards: their column sums want several rows per block.)
template <auto Kernel>
inline RowPlan fit_block(RowPlan p, int64_t rows) {
  // Kernel's threads an SM holds at once in blocks of `threads`; negative when the calculator fails (not fitted).
  const auto resident = [](int threads) { return blocks_per_sm<Kernel>(threads, 0) * threads; };
  const int most = p.rows_per_block > 1 ? resident(p.threads()) : 0;
  while (most > 0 && p.rows_per_block > 1 && p.group * (p.rows_per_block / 2) >= 32 &&
         resident(p.group * (p.rows_per_block / 2)) >= most) {
    p.rows_per_block /= 2;
  }
  p.blocks = (rows + p.rows_per_block - 1) / p.rows_per_block;
  return p;
}

// Launches a forward's row kernel, its plan's blocks fitted to it: launch_rows<&kernel<...>>(plan, rows, stream,
// the kernel's arguments but the last), the plan's shift passed last.
template <auto Kernel, typename... Args>
inline void launch_rows(const RowPlan& plan, int64_t rows, cudaStream_t stream, Args... args) {
  const RowPlan p = fit_block<Kernel>(plan, rows);
  Kernel<<<dim3(static_cast<unsigned>(p.blocks)), p.threads(), 0, stream>>>(args..., p.shift);
}

// Calls f(std::integral_constant<int, per_thread>{}) so that the count is a compile-time constant; counts
// above MAX (which the plan never makes) are not compiled.
template <int MAX = 8, typename F>
void dispatch_per_thread(int per_thread, F&& f) {
  switch (per_thread) {
    case 1: f(std::integral_constant<int, 1>{}); break;
    case 2: if constexpr (MAX >= 2) f(std::integral_constant<int, 2>{}); break;
    case 4: if constexpr (MAX >= 4) f(std::integral_constant<int, 4>{}); break;
    case 8: if constexpr (MAX >= 8) f(std::integral_constant<int, 8>{}); break;
    default: f(std::integral_constant<int, 0>{});
  }
}

// Whether a forward keeping PER packs of N T's a thread holds a row-long vector (RowVector) in registers only
// when the rows are few (RowPlan::few): at 4 packs of 16 bytes (unaligned rows, one element a pack, ask it into L2
// instead: unmeasured). Its kernel then comes in two variants, FEW or not, so that the many-rows one keeps no
// registers for it (layernorm's <float, 4, 4>: 46 registers instead of 64; when one kernel chose at run time, those
// were reserved at any row count; 2-byte types held in a kernel that served both lost 3-16% at many rows, 8192x5120
// fp16 layernorm 58.7 -> 68.0 us on the H100). 2-byte types take it at 8200 to 16384 aligned columns and fewer rows
// than SMs (512 threads of 4 packs, where such rows stop spreading): before, their weight came from L2 after the
// row's reduction. Kernel spans, H200 (median of 40, L2 flushed), 2 rows of 16384: rmsnorm float16 3.30 -> 2.72 us,
// bfloat16 3.31 -> 2.74; layernorm 3.65 -> 3.10 and 3.81 -> 2.94 (Liger-Kernel's 2.46, 2.74, 3.04, 3.14); many rows
// unchanged (the other variant).
template <typename T, int N, int PER>
constexpr bool holds_vector_when_few() {
  return PER == 4 && N * sizeof(T) == 16;
}

// Calls f(n, per, few) with the plan's pack size, packs per thread and whether the vector is held for few rows
// (holds_vector_when_few and RowPlan::few) as compile-time constants (std::integral_constant): a forward's kernel
// template arguments. Unaligned rows, or a width that is not a multiple of the pack, go element by element (n = 1).
template <typename T, typename F>
void dispatch_forward(const RowPlan& p, F&& f) {
  const auto with_few = [&](auto n, auto per) {
    if constexpr (holds_vector_when_few<T, decltype(n)::value, decltype(per)::value>()) {
      if (p.few) return f(n, per, std::true_type{});
    }
    f(n, per, std::false_type{});
  };
  if (p.pack == 1) {
    dispatch_per_thread(p.per_thread, [&](auto per) { with_few(std::integral_constant<int, 1>{}, per); });
  } else {
    dispatch_per_thread(p.per_thread, [&](auto per) { with_few(std::integral_constant<int, kPack16<T>>{}, per); });
  }
}

// 16-byte packs through the read-only path as one 128-bit access; smaller ones as they are.
template <typename P>
__device__ __forceinline__ P load_pack(const P* p) {
  if constexpr (sizeof(P) == 16) {
    union {
      uint4 u;
      P p;
    } r;
    r.u = __ldg(reinterpret_cast<const uint4*>(p));
    return r.p;
  } else {
    return *p;
  }
}

// Output is written once and not read again here: streaming stores (evict first) keep L2 for the inputs.
template <typename P>
__device__ __forceinline__ void store_pack(P* p, const P& v) {
  if constexpr (sizeof(P) == 16) {
    __stcs(reinterpret_cast<uint4*>(p), *reinterpret_cast<const uint4*>(&v));
  } else {
    *p = v;
  }
}

// Where this thread sits: row `row` of the tensor (maybe past its end), lane `lane` of the row's group.
struct RowThread {
  int64_t row;
  int lane;
  int group;
};

__device__ __forceinline__ RowThread row_thread(int shift) {
  const int rows_per_block = blockDim.x >> shift;
  return {int64_t(blockIdx.x) * rows_per_block + (threadIdx.x >> shift), int(threadIdx.x & ((1 << shift) - 1)),
          1 << shift};
}

// This thread's packs of one row: lane, lane + group, ... With PER > 0 they are loaded into registers
// once, every load issued before the first use; with PER == 0 each pass reads memory again. A row past
// the tensor's end has no packs (its threads still take part in the reductions).
template <typename P, int PER>
struct RowPacks {
  const P* in;
  int packs;
  int lane, group;
  P v[PER > 0 ? PER : 1];

  __device__ __forceinline__ RowPacks(const P* row, int count, const RowThread& t, bool valid)
      : in(row), packs(valid ? count : 0), lane(t.lane), group(t.group) {
    if constexpr (PER > 0) {
#pragma unroll
      for (int i = 0; i < PER; ++i) {
        const int k = lane + i * group;
        if (k < packs) v[i] = load_pack(in + k);
      }
    }
  }

  // Pack k (this thread's i-th): from registers, or read again when streamed.
  __device__ __forceinline__ P at(int k, int i) const {
    if constexpr (PER > 0) {
      return v[i];
    } else {
      return load_pack(in + k);
    }
  }

  // Calls f(pack, k, i) for each of this thread's packs, k being the pack's index in the row and i the
  // thread's (0 when streamed).
  template <typename F>
  __device__ __forceinline__ void for_each(F&& f) const {
    if constexpr (PER > 0) {
#pragma unroll
      for (int i = 0; i < PER; ++i) {
        const int k = lane + i * group;
        if (k < packs) f(v[i], k, i);
      }
    } else {
      for (int k = lane; k < packs; k += group) f(load_pack(in + k), k, 0);
    }
  }
};

// A second row read alongside RowPacks (grad_out in a backward) where registers are short: its packs are
// asked into L1 up front (prefetch, no registers) and loaded where used, hitting L1.
template <typename P, int PER>
struct RowPrefetched {
  const P* in;

  __device__ __forceinline__ RowPrefetched(const P* row, int packs, const RowThread& t) : in(row) {
    if constexpr (PER > 0) {
#pragma unroll
      for (int i = 0; i < PER; ++i) {
        const int k = t.lane + i * t.group;
        if (k < packs) asm volatile("prefetch.global.L1 [%0];" ::"l"(in + k));
      }
    }
  }

  __device__ __forceinline__ P at(int k, int) const { return load_pack(in + k); }
};

// The weight (a row-long vector) as a norm's backward reads it. A thread takes the same columns in every row of its
// grid-stride loop, so where it holds 8 elements or fewer in 16-byte packs the weight's packs are loaded once, before
// the loop, and kept in registers; else loaded where used, each row. At 16 elements layernorm's <__nv_bfloat16, 8, 2>
// spilled 92 -> 164 bytes; in unaligned rows (1-element packs) its <1, 8> 16 -> 64. At 8, layernorm's
// <__nv_bfloat16, 8, 1> spills 20 bytes with it and was faster all the same (4096x4096: 49.6 -> 48.5 us alone).
template <typename T, int N, int PER>
using BackwardWeight = RowPacks<Pack<T, N>, (N > 1 && N * PER <= 8 ? PER : 0)>;

// grad_out's row of a norm's backward as G holds it (RowPacks or RowPrefetched, by backward_prefetches_grad).
template <typename G, typename P>
__device__ __forceinline__ G make_grad_row(const P* row, int packs, const RowThread& t, bool valid) {
  if constexpr (std::is_constructible_v<G, const P*, int, const RowThread&, bool>) {
    return G(row, packs, t, valid);
  } else {
    return G(row, packs, t);
  }
}

// True when the grid is a single partial wave (fewer blocks than SMs: a handful of rows, decoding): there
// the kernel waits on memory latency, and a row-long vector is worth asking for early.
__device__ __forceinline__ bool few_blocks() {
  unsigned sms;
  asm("mov.u32 %0, %%nsmid;" : "=r"(sms));
  return gridDim.x < sms;
}

// A row-long vector every row uses (a weight, a bias): with few packs per thread (short rows, or few rows
// spread over many threads) loaded into registers up front, its latency (from DRAM, the first time) then
// hidden behind the row's reductions; at 4 packs of 16 bytes a thread also when the rows are few (FEW: the kernel's
// variant for a plan with RowPlan::few, holds_vector_when_few; decoding: one row per SM, nothing else to wait on;
// 4 rows of 8192 float32 on the H100: layernorm 3.80 -> 3.14 us, rmsnorm 3.25 -> 2.77 us); else loaded where
// used (from L1 or L2: other rows brought it there), and asked into L2 up front when the rows are few.
template <typename P, int PER, bool FEW = false>
struct RowVector {
  static constexpr bool kHeld = PER > 0 && (PER <= 2 || (FEW && PER == 4));
  const P* in;
  P v[kHeld ? PER : 1];

  template <typename Row>
  __device__ __forceinline__ RowVector(const P* vec, const Row& row) : in(vec) {
    if constexpr (kHeld) {
#pragma unroll
      for (int i = 0; i < PER; ++i) {
        const int k = row.lane + i * row.group;
        if (k < row.packs) v[i] = load_pack(in + k);
      }
    } else if constexpr (PER > 0) {
      // Not held: with a handful of rows it would come from DRAM only after the row's reductions (on the
      // H100, 4 rows of 8192 float32 waited ~1 us for it); asked into L2 now, it is there by then.
      if (few_blocks()) {
#pragma unroll
        for (int i = 0; i < PER; ++i) {
          const int k = row.lane + i * row.group;
          if (k < row.packs) asm volatile("prefetch.global.L2 [%0];" ::"l"(in + k));
        }
      }
    }
  }

  __device__ __forceinline__ P operator()(int k, int i) const {
    if constexpr (kHeld) {
      return v[i];
    } else {
      return load_pack(in + k);
    }
  }
};

struct Sum {
  static constexpr float identity = 0.f;
  __device__ static float apply(float a, float b) { return a + b; }
};
struct Max {
  static constexpr float identity = -INFINITY;
  __device__ static float apply(float a, float b) { return fmaxf(a, b); }
};

__device__ __forceinline__ float2 shfl_xor(float2 v, int offset) { return {shfl_xor(v.x, offset), shfl_xor(v.y, offset)}; }
__device__ __forceinline__ float4 shfl_xor(float4 v, int offset) {
  return {shfl_xor(v.x, offset), shfl_xor(v.y, offset), shfl_xor(v.z, offset), shfl_xor(v.w, offset)};
}

// Every thread of a row's group gets combine() of the group's values v (float, float2 or float4: several
// statistics reduced at once cost one reduction's latency and synchronisations). All threads of the block
// must call it (it may synchronise the block); groups are powers of two, whole warps when they span several.
template <typename V, typename Combine>
__device__ __forceinline__ V group_combine(V v, int group, Combine combine) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) {
    if (offset < group) v = combine(v, shfl_xor(v, offset));
  }
  if (group <= 32) return v;
  __shared__ V partial[kRowMaxThreads / 32];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, warps = group / 32;
  __syncthreads();  // a previous call's readers are done with `partial`
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  // The warps of this row are warp - warp % warps, ...; each lane takes one partial (repeated past
  // `warps`, so the butterfly below gives every lane the same total).
  V r = partial[warp - warp % warps + lane % warps];
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) {
    if (offset < warps) r = combine(r, shfl_xor(r, offset));
  }
  return r;
}

template <typename Op>
__device__ __forceinline__ float group_reduce(float v, int group) {
  return group_combine(v, group, [](float a, float b) { return Op::apply(a, b); });
}

// The sums of (x, y) over a row's group.
__device__ __forceinline__ float2 group_sum2(float2 v, int group) {
  return group_combine(v, group, [](float2 a, float2 b) { return make_float2(a.x + b.x, a.y + b.y); });
}

// A warp's sums of four values, reduce-scatter: each butterfly step sends half of what a lane holds (6 shuffles where
// group_combine's butterfly takes 20). Lane l ends with the warp's total of one value: x in lanes 0-7, y in 8-15, z in
// 16-23, w in 24-31.
__device__ __forceinline__ float warp_scatter_sum4(float4 v, int lane) {
  const bool high = lane & 16, odd = lane & 8;
  float a = high ? v.z : v.x, b = high ? v.w : v.y;
  a += shfl_xor(high ? v.x : v.z, 16);
  b += shfl_xor(high ? v.y : v.w, 16);
  float k = odd ? b : a;
  k += shfl_xor(odd ? a : b, 8);
  k += shfl_xor(k, 4);
  k += shfl_xor(k, 2);
  return k + shfl_xor(k, 1);
}

// The four totals warp_scatter_sum4 left spread over the warp, in every lane.
__device__ __forceinline__ float4 warp_gather4(float k) {
  return make_float4(__shfl_sync(0xffffffffu, k, 0), __shfl_sync(0xffffffffu, k, 8), __shfl_sync(0xffffffffu, k, 16),
                     __shfl_sync(0xffffffffu, k, 24));
}

// The sums of (x, y, z, w) over a row's group. Groups of whole warps reduce-scatter (warp_scatter_sum4): each warp's
// four totals stored by four lanes, then every warp reduces its row's warps' totals the same way (lane i taking warp
// i's, zeros past the row's warps) and gathers them. layernorm's backward reduces four sums a row; at 8 elements a
// thread (rows of 4096 over 512 threads) group_combine's 36 shuffles and as many adds were a third of the loop's
// instructions, and this takes 16. Kernel spans, H200, with the weight loaded once and the next row's L2 prefetch
// (layernorm_backward.cu): 4096x4096 float16 46.3 -> 41.1 us, bfloat16 49.6 -> 44.7; alone -2.0% and -3.7%; 8192x5120
// float16 -2.4%, 16384x1024 bfloat16 -4.2%. rmsnorm's two sums (group_sum2) gained nothing from it (-1.7% to +1.4%).
__device__ __forceinline__ float4 group_sum4(float4 v, int group) {
  if (group < 32) {
    return group_combine(v, group, [](float4 a, float4 b) {
      return make_float4(a.x + b.x, a.y + b.y, a.z + b.z, a.w + b.w);
    });
  }
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = group / 32;
  const float k = warp_scatter_sum4(v, lane);
  if (group == 32) return warp_gather4(k);
  __shared__ float4 partial[kRowMaxThreads / 32];
  __syncthreads();  // a previous call's readers are done with `partial`
  if (lane % 8 == 0) reinterpret_cast<float*>(partial + warp)[lane / 8] = k;
  __syncthreads();
  const float4 mine = lane < warps ? partial[warp - warp % warps + lane] : make_float4(0.f, 0.f, 0.f, 0.f);
  return warp_gather4(warp_scatter_sum4(mine, lane));
}

// The plan of a norm's backward: at most 16 elements of each of x and grad_out per thread (32 for rows
// too long for that), a block of 1024 threads only for 8 or fewer.
// `spread`: the 2-byte spread below, for backwards that keep more than x and grad_out (norms: the weight, the
// running sums); softmax's does not (it holds y and grad_out only), and there 512 threads of 2 packs a row beat
// 1024 of one (4x8192 fp16 on the H200: 2.45 -> 2.21 us).
inline RowPlan plan_backward_rows(int64_t rows, int64_t cols, int pack16, bool aligned, int sms, bool spread = true) {
  RowPlan p = plan_rows(rows, cols, pack16, aligned, sms, 16);
  if (p.per_thread == 0) p = plan_rows(rows, cols, pack16, aligned, sms, 32);
  if (p.per_thread > 0 && p.pack * p.per_thread > 8 && p.threads() > kRowMaxThreads / 2) p.per_thread = 0;
  // A handful of rows of a 2-byte type (fewer blocks than SMs: decoding): each row spread over up to 1024
  // threads until grad_out fits in registers beside x, instead of its L1 prefetch (backward_prefetches_grad).
  // Tried when 4 rows of 8192 fp16 took 12.4 us in the backward kernel against 4.9 us for float32; alone it did
  // not help (13.2 us): Nsight Compute then put the time in the partial sums' one-float stores (lg_throttle),
  // which ColumnSums::write now makes 16 bytes wide. The H100 figures in results/h100-norms have both.
  // A group of 1024 only where a thread then holds 8 elements or fewer (backward_block_limit): rows of 8200 to
  // 16384 fp16 had gone from 512 threads of 4 packs to 1024 of 2, a block the kernel cannot launch.
  while (spread && p.pack >= 8 && p.per_thread > 1 && p.pack * p.per_thread > 8 && p.group < kRowMaxThreads &&
         p.rows_per_block == 1 && p.few && (2 * p.group < kRowMaxThreads || p.pack * p.per_thread <= 16)) {
    p.group *= 2;
    p.per_thread /= 2;
    ++p.shift;
  }
  return p;
}

// layernorm's backward plan (rows of T): rows at kNormEvenElems elements a thread where that spreads them evenly over
// at most kBackwardEvenGroup threads (plan_even_rows), instead of 16 (plan_backward_rows):
// - float32: its four running sums beside x and grad_out took 111 registers at 16 (an SM held 2 blocks of 256); at 8,
//   61. H200 kernel times, 16384 rows of 1024: 60.2 -> 58.1 us, of 2048: 110.9 -> 105.5; 4096x4096 60.9 -> 59.5.
// - 2-byte types, where plan_backward_rows gives one row a block (rows of 4096: 256 threads of 2 packs, the variant
//   <8, 2> held to 64 registers, which spilled 52 bytes for float16 and 92 for bfloat16; at 8 elements, 512 threads
//   of one pack, grad_out in registers, none). The backward kernel plus the column sums, H200: 4096x4096 float16
//   48.0 -> 46.6 us, bfloat16 66.2 -> 49.6; 2048x4096 31.0 -> 28.6, 38.6 -> 30.6; 16384x4096 152.4 -> 151.0, 230.0
//   -> 164.6. Not where several rows share a block (the three_blocks variant of layernorm_backward.cu), nor for a
//   handful of rows (plan_backward_rows spreads those already). bfloat16 rows up to a block of 1024 (rows of 8192:
//   1024 threads of one pack against 512 of two), float16 not: its <8, 2> spills less and lost there (kernel plus
//   column sums, 1024 / 2048 / 4096 rows of 8192: bfloat16 41.7 -> 36.6 / 69.9 -> 59.7 / 124.4 -> 101.5 us, float16
//   34.0 -> 35.6 / 53.3 -> 57.6 / 89.1 -> 98.7).
//   Staged, <8, 2> spills less (10 and 30 bytes), and still lost at rows of 4096 (twice the blocks, so twice the
//   partial rows; 4096x4096 float16 / bfloat16 spans +7.4% / +13.2%, 1024x4096 +27.8% / +25.5%; H200, 2026-12-01).
// bfloat16 rows of 513 to 1023 packs (4104 to 8184 columns), which no power of two of threads holds evenly: one pack a
// thread over 1024 threads, some idle, rather than <8, 2> over 512 (which spills 92 bytes). Spans, H200, kernel plus
// column sums: 8192x5120 145.5 -> 126.1 us, 1024x5120 28.1 -> 24.2, 4096x6144 92.2 -> 72.7, 2048x7168 59.1 -> 45.5.
// float16 not (its <8, 2> spills 52 bytes): 8192x5120 104.2 -> 116.9 us, 4096x6144 +2.7%, 2048x7168 -8.8%.
// rmsnorm's backward gained nothing from it (16384x1024 float32 54.9 -> 55.1 us) and lost for 2-byte rows (bfloat16
// 4096x4096 36.9 -> 41.5 us: it does not spill at 16): it keeps plan_backward_rows.
constexpr int kBackwardEvenGroup = 512;

// layernorm's `wide` plan (the device stages its 2-byte rows at 4 packs a thread in blocks of 256: stages_at): 2-byte
// rows that plan_backward_rows spreads unevenly over its group (2560 to 7168 columns: 320 to 896 packs over 256 or 512
// threads, or bfloat16's 1024 above) take plan_rows's 32 elements a thread instead, when that plan keeps them (not
// spread to fewer for want of rows), over fewer threads (at least kWideGroup: a block of 256 then holds one row or two,
// Sums::kBlockRows compiled to 32 elements for layernorm: dispatch_backward's WIDE). Its reduction of four sums then
// crosses fewer warps, and fewer threads sit idle. Spans of the backward kernel and column_sums, H200, float16 /
// bfloat16: 8192x5120 93.5 -> 85.2 / 110.3 -> 89.1 us, 2048x5120 32.1 -> 30.3 / 34.6 -> 31.7, 4096x6144 58.0 -> 56.8 /
// 64.5 -> 57.9, 4096x7168 64.4 -> 62.9 / 69.4 -> 64.4, 16384x2560 90.7 -> 88.1 / 100.1 -> 91.1, 8192x3072 54.5 -> 56.0
// (+2.9%) / 59.3 -> 57.2. Not for even rows: 1024, 2048 and 4096 columns lost 1-4% so. rmsnorm's two sums gained only
// at 5120 columns (-2% to -5%) and lost up to 4% at 2560 to 7168: it keeps its plan.
constexpr int kWideGroup = 128;

template <typename T>
inline RowPlan plan_layernorm_backward(int64_t rows, int64_t cols, bool aligned, int sms, bool wide = false) {
  const RowPlan p = plan_backward_rows(rows, cols, kPack16<T>, aligned, sms);
  if (sizeof(T) == 2 && wide && p.pack > 1 && p.per_thread > 0 && !p.few && (cols / p.pack) % p.group != 0) {
    const RowPlan w = plan_rows(rows, cols, kPack16<T>, aligned, sms, 32);
    if (w.pack * w.per_thread == 32 && !w.few && w.group >= kWideGroup) return w;
  }
  if (sizeof(T) == 4 || (p.per_thread > 1 && p.rows_per_block == 1 && !p.few)) {
    const int group = std::is_same_v<T, __nv_bfloat16> ? kRowMaxThreads : kBackwardEvenGroup;
    if (const auto e = plan_even_rows(rows, cols, kPack16<T>, aligned, sms, kNormEvenElems, group)) return *e;
    if (std::is_same_v<T, __nv_bfloat16> && p.per_thread == 2 && p.group == kRowMaxThreads / 2) {
      const RowPlan one = plan_rows(rows, cols, kPack16<T>, aligned, sms, kNormEvenElems);
      if (one.per_thread == 1 && one.group == kRowMaxThreads) return one;
    }
  }
  return p;
}

template <int N, int PER>
constexpr int backward_block_limit() {
  return N * PER > 8 ? kRowMaxThreads / 2 : kRowMaxThreads;
}

// Blocks of that size a norm's backward keeps resident per SM, at least: with 16 elements per thread of a
// 2-byte type (8 to a pack), 2 blocks of 512 (64 registers a thread). Without it ptxas took 128 registers for
// fp16 and an SM held one block: too few bytes in flight (the H100's fp16 backward ran at 40% of the copy
// bandwidth, no faster than fp32). Not for float32: its 16 elements a thread spilled at 64 registers (its
// 4096x4096 backward fell from 1.18x to 0.87x of Liger-Kernel's), and one block of 512 per SM suits it.
template <int N, int PER>
constexpr int backward_min_blocks() {
  return N >= 8 && N * PER > 8 && N * PER <= 16 ? 2 : 1;
}

// grad_out of a norm's backward beside x where it is not staged (backward_staged): held in registers as x is, but
// prefetched into L1 and loaded where used
// (registers kept for the running sums) for 2-byte types past 8 elements a thread, and for float32 past 16 where
// the backward keeps SUMS = 4 running sums. layernorm's <float, 4, 8> spilled 316 bytes with grad_out in registers
// and took 197 us for a 2048x14336 backward on the H100, 159 us with the prefetch; rmsnorm's two sums fit there
// (no spill), and it took 133 us without the prefetch, 142 us with it.
template <int N, int PER, int SUMS = 2>
__host__ __device__ constexpr bool backward_prefetches_grad() {
  return (N >= 8 && N * PER > 8) || (SUMS > 2 && N * PER > 16);
}

// Whether a norm's backward (SUMS running sums a row) keeps its column sums in shared memory rather than registers:
// past 16 elements a thread with grad_out in registers, where x, grad_out and the sums (32 floats each) leave
// ptxas spilling (rmsnorm's <float, 4, 8>: 36 bytes; 2048x14336 on the H200, 108.1 -> 99.5 us). Not where grad_out
// is prefetched into L1 (backward_prefetches_grad): the shared memory takes L1's room, and those backwards slowed
// (2048x14336: layernorm float32 116 -> 141 us, fp16 77 -> 134 us).
template <int N, int PER, int SUMS>
__host__ __device__ constexpr bool backward_sums_shared() {
  return N * PER > 16 && !backward_prefetches_grad<N, PER, SUMS>();
}

// Blocks of a norm's backward grid, at most: as many as can be resident at once (by threads), or one per
// block of rows when fewer. The partial sums take this many rows of cols floats per gradient.
inline int64_t backward_grid_bound(const RowPlan& p, int sms) {
  return std::min<int64_t>(p.blocks, int64_t(sms) * std::max(1, 2048 / p.threads()));
}

// The grid actually launched: what the occupancy calculator says fits, within the bound.
template <auto Kernel>
inline int backward_grid(const RowPlan& p, size_t smem, int sms) {
  const int per_sm = blocks_per_sm<Kernel>(p.threads(), smem);
  return static_cast<int>(std::min<int64_t>(backward_grid_bound(p, sms), int64_t(sms) * std::max(1, per_sm)));
}

// How a norm backward's blocks sum the weight's (and bias's) gradient over rows: a compile-time choice, so that
// each variant holds only its own epilogue. With the several-rows epilogue in every variant, ptxas spilled more in
// the one-row ones (layernorm <__half, 8, 2>: 60 -> 80 bytes; its 8192x5120 fp16 backward 104.8 -> 112.7 us on the
// H200), though they never run it.
enum class Sums {
  kBlockRows,  // any rows per block: each block's row of partial sums, through shared memory when it holds several
  kOneRow,     // one row per block (blockDim == the row's group): straight from registers to the partial row
  kStats,      // a handful of rows: each row's statistics, and weight_grads sums the columns (backward_uses_stats)
};

// Whether a norm's backward asks the next row of its grid-stride loop into L2 (prefetch_next_row; staged rows,
// backward_staged, copy it into shared memory instead): for float32 at 16
// elements a thread, where one block of 512 fills an SM and nothing else hides a row's load behind another's
// reduction (8192x5120 on the H200: layernorm 161.0 -> 131.6 us, rmsnorm 148.2 -> 125.1 us). Not at 32 elements
// (the addresses cost registers: rmsnorm's <float, 4, 8> spilled 152 bytes, 2048x14336 108 -> 155 us), nor for 2-byte
// types at 16 elements (<8, 2>: no gain, and more spills). 2-byte types at 8 (<8, 1>: layernorm's rows of 4096 over
// 512 threads, kl::plan_layernorm_backward) gained: 4096x4096 float16 46.3 -> 43.3 us, bfloat16 49.6 -> 47.5 (spans,
// H200, the prefetch alone: no spill). Hopper's bulk prefetch instead (cp.async.bulk.prefetch.L2: one thread asks a
// whole row, no addresses in registers), for every float32 variant: -3% to +3.8% where it replaced this one (<4, 4>),
// +0.5% to +28% where there had been none (2048x14336 layernorm: 11% more DRAM reads, lines gone before use); the
// staged 2-byte rows asking a second row ahead so: -4% to +4% (spans, H200, 2026-11-30; results/h200-norms, "bound on
// the SM").
template <int N, int PER>
__host__ __device__ constexpr bool backward_prefetches_next() {
  return (N == 4 && PER == 4) || (N == 8 && PER == 1);
}

// The row a thread of a norm's backward takes next in its grid-stride loop (`next`, maybe past the end), x's and
// grad_out's packs, asked into L2 while this one is reduced and written, so that its loads wait on L2 rather than
// DRAM: where backward_prefetches_next says so, and not with row statistics (a handful of rows: no next row).
template <int N, int PER, Sums S, typename P, typename T>
__device__ __forceinline__ void prefetch_next_row(const T* x, const T* dy, int64_t next, int64_t rows, int64_t cols,
                                                  int packs, const RowThread& t) {
  if constexpr (backward_prefetches_next<N, PER>() && S != Sums::kStats) {
    if (next >= rows) return;
    const P* in_x = reinterpret_cast<const P*>(x + next * cols);
    const P* in_dy = reinterpret_cast<const P*>(dy + next * cols);
#pragma unroll
    for (int i = 0; i < PER; ++i) {
      const int k = t.lane + i * t.group;
      if (k < packs) asm volatile("prefetch.global.L2 [%0];" ::"l"(in_x + k));
    }
#pragma unroll
    for (int i = 0; i < PER; ++i) {
      const int k = t.lane + i * t.group;
      if (k < packs) asm volatile("prefetch.global.L2 [%0];" ::"l"(in_dy + k));
    }
  }
}

// Whether a norm's backward stages x's and grad_out's rows through shared memory (BackwardRows): 2-byte types in
// 16-byte packs, many rows (not Sums::kStats). Spans of the backward kernel and column_sums, H200 (median of 30, L2
// flushed), registers held row by row -> staged:
// - layernorm float16 / bfloat16: 16384x1024 41.3 -> 37.7 / 44.6 -> 38.2 us, 8192x5120 105.1 -> 94.1 / 124.9 -> 110.3,
//   2048x14336 82.6 -> 68.1 / 89.0 -> 70.1, 1024x5120 -7.2% / -11.2%, 4096x4096 41.0 -> 41.2 / 44.3 -> 42.4.
// - rmsnorm bfloat16: 16384x1024 36.7 -> 35.3 us, 4096x4096 37.5 -> 36.4, 8192x5120 94.2 -> 80.7, 2048x14336 74.2 ->
//   61.6. float16 -9% to -16% at 1024x5120 to 2048x14336; +0.9% and +1.5% at 16384x1024 and 4096x4096 (35.6 -> 36.1
//   us), where its registers already held a row's loads in flight; staged there too, for one path.
// float32 (4-element packs) keeps its registers: its rows are twice the bytes, and its variants are at 78-91% of the
// copy bandwidth at those shapes without it.
template <int N, int PER, Sums S>
__host__ __device__ constexpr bool backward_staged() {
  return N == 8 && PER >= 1 && S != Sums::kStats;
}

// Staging takes cp.async (sm_80 and later): code compiled for older GPUs keeps the rows in registers (the host stages
// only on compute capability 8.0 and later: stages_rows).
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
constexpr bool kArchStagesRows = false;
#else
constexpr bool kArchStagesRows = true;
#endif

// A thread's packs of one row in a stage of shared memory (BackwardRows), read as RowPacks reads registers: pack i at
// slot[i * blockDim.x].
template <typename P, int PER>
struct StagedRow {
  const P* slot;
  int packs, lane, group;

  __device__ __forceinline__ P at(int, int i) const { return slot[i * blockDim.x]; }

  template <typename F>
  __device__ __forceinline__ void for_each(F&& f) const {
#pragma unroll
    for (int i = 0; i < PER; ++i) {
      const int k = lane + i * group;
      if (k < packs) f(at(k, i), k, i);
    }
  }
};

// x's and grad_out's rows of a norm backward's grid-stride loop. STAGED (a variant that may stage, backward_staged, on
// a device where stages_rows says so; launch_staged_or_not picks): each thread copies its own packs of the row it
// takes next into shared memory (cp.async) before it works on this one, and reads this one's from there where used,
// once for the sums and again for grad_x; no registers hold a row in flight, and the next row's loads overlap this
// one's reductions and stores. Each thread reads only the slots it copied itself: no block synchronisation. Slot
// (stage, array, pack i, thread) at ((stage * 2 + array) * PER + i) * blockDim.x + threadIdx.x (16-byte accesses by
// consecutive threads: no bank conflicts); backward_shared_bytes counts them. Otherwise loaded into registers row by
// row (RowPacks; grad_out maybe RowPrefetched) with the next row's L2 prefetch.
// Each thread copying its own packs costs it about 63 of a turn's ~340 instructions (layernorm <__half, 8, 1>, SASS).
// Stages filled by bulk copies instead (sm_90: thread 0 asks for the block's rows of a turn, x's and grad_out's, as two
// cp.async.bulk on an mbarrier) took those away and lost: after each row's reduction (its barrier frees the other
// stage), spans +6% to +40%; three stages, two turns ahead, -1.9% to +8.3%; behind a barrier at the turn's start, +3.6%
// to +12.1% (layernorm float16 and rmsnorm bfloat16, bench shapes, H200, 2026-12-01; results/h200-norms, "bulk
// copies"). A thread waits there for the block's rows, and a stage for the slowest thread, where here each waits only
// for its own 32 bytes.
template <typename T, int N, int PER, Sums S, int SUMS, bool STAGED>
struct BackwardRows {
  static_assert(!STAGED || backward_staged<N, PER, S>(), "a variant that may stage");
  static constexpr bool kStaged = STAGED && kArchStagesRows;
  using P = Pack<T, N>;
  const T* x;
  const T* dy;
  int64_t rows, cols;
  int packs;
  P* slots;
  int stage = 0;
  // staged: x's first element of the row in the stage (layernorm's shift), loaded with it and converted only where
  // used, a turn later: converted at once, the load's wait sat in every turn (a row's fixed cost). Spans of the
  // backward kernel and column_sums, H200, layernorm float16 / bfloat16: 4096x4096 41.1 -> 37.0 / 42.0 -> 38.2 us,
  // 8192x5120 -3.4% / -3.8%, 16384x1024 -0.4% / -2.2%, 2048x14336 +0.6% / -0.8%.
  T first{};

  __device__ __forceinline__ BackwardRows(const T* x_, const T* dy_, int64_t rows_, int64_t cols_, int packs_,
                                          void* shared, int64_t row, const RowThread& t)
      : x(x_), dy(dy_), rows(rows_), cols(cols_), packs(packs_), slots(static_cast<P*>(shared)) {
    if constexpr (kStaged) fetch(0, row, t);
  }

  __device__ __forceinline__ P* slot(int s, int array, int i) const {
    return slots + ((s * 2 + array) * PER + i) * static_cast<int>(blockDim.x) + threadIdx.x;
  }

  __device__ __forceinline__ void fetch(int s, int64_t row, const RowThread& t) {
    if (row < rows) {
      const P* in_x = reinterpret_cast<const P*>(x + row * cols);
      const P* in_dy = reinterpret_cast<const P*>(dy + row * cols);
#pragma unroll
      for (int i = 0; i < PER; ++i) {
        const int k = t.lane + i * t.group;
        if (k < packs) {
          cp_async16(slot(s, 0, i), in_x + k, true);
          cp_async16(slot(s, 1, i), in_dy + k, true);
        }
      }
      first = x[row * cols];
    }
    cp_async_commit();
  }

  // Calls f(x's row, grad_out's row, x's first element) for the row at `offset` (`valid`: inside the tensor; else
  // offset 0), after asking for row `next`, this thread's next turn (maybe past the end).
  template <typename F>
  __device__ __forceinline__ void turn(int64_t offset, int64_t next, bool valid, const RowThread& t, F&& f) {
    if constexpr (kStaged) {
      const float x0 = to_float(first);
      fetch(stage ^ 1, next, t);
      cp_async_wait<1>();  // this row's copies have landed
      const int n = valid ? packs : 0;
      const StagedRow<P, PER> xr{slot(stage, 0, 0), n, t.lane, t.group}, gr{slot(stage, 1, 0), n, t.lane, t.group};
      f(xr, gr, valid ? x0 : 0.f);
      stage ^= 1;
    } else {
      const RowPacks<P, PER> xr(reinterpret_cast<const P*>(x + offset), packs, t, valid);
      // grad_out held in registers as x is (backward_prefetches_grad: or prefetched into L1).
      using G = std::conditional_t<backward_prefetches_grad<N, PER, SUMS>(), RowPrefetched<P, PER>, RowPacks<P, PER>>;
      const G gr = make_grad_row<G>(reinterpret_cast<const P*>(dy + offset), valid ? packs : 0, t, valid);
      prefetch_next_row<N, PER, S, P>(x, dy, next, rows, cols, packs, t);
      f(xr, gr, valid ? to_float(x[offset]) : 0.f);
    }
  }

  // After the loop: nothing in flight (the shared memory is then the column sums').
  __device__ __forceinline__ void finish() const {
    if constexpr (kStaged) cp_async_wait<0>();
  }
};

// Backward passes of norms: the weight's (and bias's) gradient sums over rows. Each block keeps its
// threads' sums over the rows it handles (in registers; in shared memory past 16 elements a thread), adds the row
// groups of the block together in shared memory, and writes one row of float32 partial sums; column_sums then adds
// the blocks' rows. A grid of as many blocks as fit on the GPU at once keeps the partial rows few. They still cost:
// every block finishes at once, so writing them and reading them back is a tail nothing overlaps (a bound that wrote
// none: spans -5% to -15% at 2-byte bench shapes, H200). Adding them up over thread-block clusters first (distributed
// shared memory, one row per cluster of 2, 4 or 8 blocks) lost: spans -2% to +12.5% at those shapes, most of them
// up. Clusters of 4 or 8 fit fewer blocks at once (layernorm 4096x4096 float16: 264 -> 248 and 240), and at 2, which
// fit as many, the cluster's barrier and reads cost more than the halved rows saved. Nor did several rows a block,
// half the blocks: spans level, the row reductions' barriers then wait on more warps (results/h200-norms, "Partial
// rows").
template <int N, int PER, Sums S, int SUMS>
struct ColumnSums {
  // One row per block, more than 16 elements a thread, grad_out in registers (backward_sums_shared): the sums in a
  // row of shared memory of their own, each thread touching only its own columns (no synchronisation).
  static constexpr bool kShared = S == Sums::kOneRow && backward_sums_shared<N, PER, SUMS>();
  float v[PER > 0 && !kShared ? PER : 1][N];
  float* acc;  // kShared: this sum's row of cols floats in shared memory

  __device__ __forceinline__ ColumnSums(float* shared_row, int packs, int lane, int group) : acc(shared_row) {
    if constexpr (kShared) {
#pragma unroll
      for (int i = 0; i < PER; ++i) {
        const int k = lane + i * group;
        if (k < packs) {
#pragma unroll
          for (int j = 0; j < N; ++j) acc[k * N + j] = 0.f;
        }
      }
    } else {
#pragma unroll
      for (int i = 0; i < (PER > 0 ? PER : 1); ++i) {
#pragma unroll
        for (int j = 0; j < N; ++j) v[i][j] = 0.f;
      }
    }
  }

  // Adds x to column k * N + j (this thread's pack i); streamed rows add straight into the block's partial
  // row in global memory (zeroed before the launch, and only this thread touches these columns).
  __device__ __forceinline__ void add(int k, int i, const float (&x)[N], float* partial) {
    if constexpr (kShared) {
#pragma unroll
      for (int j = 0; j < N; ++j) acc[k * N + j] += x[j];
    } else if constexpr (PER > 0) {
#pragma unroll
      for (int j = 0; j < N; ++j) v[i][j] += x[j];
    } else {
#pragma unroll
      for (int j = 0; j < N; ++j) partial[k * N + j] += x[j];
    }
  }

  // This thread's sums into `row` (cols floats): 16-byte stores when the packs are whole float4s (cols is then a
  // multiple of N, so every row of partials starts on 16 bytes): one float each had the LSU queue throttling a
  // handful of fp16 rows (Nsight Compute: lg_throttle).
  __device__ __forceinline__ void store(float* row, int packs, int lane, int group) const {
#pragma unroll
    for (int i = 0; i < PER; ++i) {
      const int k = lane + i * group;
      if (k < packs) {
        if constexpr (N % 4 == 0) {
#pragma unroll
          for (int j = 0; j < N; j += 4) {
            *reinterpret_cast<float4*>(row + k * N + j) =
                kShared ? *reinterpret_cast<const float4*>(acc + k * N + j)
                        : make_float4(v[i][j], v[i][j + 1], v[i][j + 2], v[i][j + 3]);
          }
        } else {
#pragma unroll
          for (int j = 0; j < N; ++j) row[k * N + j] = kShared ? acc[k * N + j] : v[i][j];
        }
      }
    }
  }

  // The block's sums into `partial` (its row of cols floats). `shared`: backward_shared_bytes of dynamic
  // shared memory when the block holds several rows. All threads of the block call it.
  __device__ __forceinline__ void write(float* partial, float* shared, int packs, int lane, int group, int cols) {
    if constexpr (PER > 0 && S != Sums::kStats) {
      if (S == Sums::kOneRow || blockDim.x == unsigned(group)) return store(partial, packs, lane, group);
      if constexpr (S == Sums::kBlockRows) {
        // Several rows per block: each row's group stores its sums in a row of `shared` of its own, and a thread
        // per column adds those rows up. Shared-memory atomics into one row had the groups wait on each other's
        // addresses (H200, 16384x1024: layernorm's fp16 backward 70.4 -> 49.3 us, rmsnorm's bf16 45.8 -> 35.1).
        const int rows_per_block = static_cast<int>(blockDim.x) / group;
        __syncthreads();  // earlier users of `shared` are done
        store(shared + (static_cast<int>(threadIdx.x) / group) * cols, packs, lane, group);
        __syncthreads();
        for (int c = threadIdx.x; c < cols; c += blockDim.x) {
          float s = 0.f;
          for (int r = 0; r < rows_per_block; ++r) s += shared[r * cols + c];
          partial[c] = s;
        }
      }
    }
  }
};

// Dynamic shared memory of a norm's backward with `count` column sums (ColumnSums<N, PER, S, SUMS>): a row of
// cols floats per sum when they are kept in shared memory, else a row per row of the block when it holds several,
// else none.
template <int N, int PER, Sums S, int SUMS, bool STAGED = false>
inline size_t backward_shared_bytes(const RowPlan& p, int64_t cols, int count) {
  if (ColumnSums<N, PER, S, SUMS>::kShared) return size_t(count) * size_t(cols) * sizeof(float);
  const size_t sums = p.rows_per_block > 1 ? size_t(p.rows_per_block) * size_t(cols) * sizeof(float) : 0;
  // Staged rows (BackwardRows): two stages of x's and grad_out's packs, 16 bytes each; the column sums use the same
  // memory after the loop.
  static_assert(!(backward_staged<N, PER, S>() && ColumnSums<N, PER, S, SUMS>::kShared), "one use of the memory");
  const size_t staged = STAGED ? size_t(2 * 2 * PER) * size_t(p.threads()) * 16 : 0;
  return std::max(sums, staged);
}

// Whether this device runs a norm backward's variant staged (Staged, `staged` bytes of dynamic shared memory) rather
// than with its rows in registers (Plain, `plain` bytes): on compute capability 8.0 and later, where a block may have
// that much shared memory and an SM still holds as many blocks as without it. H100 and H200 (228 KB an SM) stage every
// variant; GPUs of 100 KB an SM (compute capability 8.6, 8.9, 12.0) would hold fewer blocks of some, and could not
// launch the 128 KB one (4 packs a thread, 512 threads) at all. 1 yes, 0 no, -1 when the runtime could not say (not
// staged; stages_at caches only a yes or a no).
template <auto Staged, auto Plain>
inline int stages_rows(const RowPlan& p, size_t staged, size_t plain) {
  if (compute_major() < 8) return 0;
  const int fixed = prepare_kernel<Staged>();  // Staged's static shared memory
  if (fixed < 0) return -1;
  if (staged + size_t(fixed) > size_t(device_attribute<cudaDevAttrMaxSharedMemoryPerBlockOptin>())) return 0;
  const int with = blocks_per_sm<Staged>(p.threads(), staged), without = blocks_per_sm<Plain>(p.threads(), plain);
  if (with < 0 || without < 0) return -1;
  return with >= 1 && with >= without ? 1 : 0;
}

// Whether this device runs Staged rather than Plain, the twins of a norm backward's variant <N, PER, S> (SUMS running
// sums, `count` column sums) in blocks of `threads` holding one row (stages_rows), asked once per device. layernorm's
// `wide` plan (plan_layernorm_backward) asks it of its <8, 4> variants at 256 threads: true on A100, H100 and H200;
// false on GPUs of 100 KB an SM, where the staged block fits but an SM would hold fewer of them than of the twin,
// whose bfloat16 spills.
template <auto Staged, auto Plain, int N, int PER, Sums S, int SUMS>
inline bool stages_at(int threads, int count) {
  static DeviceCache cache;
  return cached_yes(cache, [&] {
    RowPlan p;
    p.group = threads;
    const size_t staged = backward_shared_bytes<N, PER, S, SUMS, true>(p, 0, count);
    return stages_rows<Staged, Plain>(p, staged, backward_shared_bytes<N, PER, S, SUMS>(p, 0, count));
  });
}

// Calls go(kernel, smem) for a norm backward's variant <N, PER, S> (SUMS running sums, `count` column sums):
// kernel_of(std::bool_constant<STAGED>) is its kernel (kl::Kernel), staged where it may be (backward_staged) and
// this device gains no fewer resident blocks from it (stages_rows).
template <int N, int PER, Sums S, int SUMS, typename K, typename G>
inline void launch_staged_or_not(const RowPlan& p, int64_t cols, int count, K&& kernel_of, G&& go) {
  const size_t plain = backward_shared_bytes<N, PER, S, SUMS>(p, cols, count);
  using Plain = decltype(kernel_of(std::false_type{}));
  if constexpr (backward_staged<N, PER, S>()) {
    using Staged = decltype(kernel_of(std::true_type{}));
    const size_t staged = backward_shared_bytes<N, PER, S, SUMS, true>(p, cols, count);
    if (stages_rows<Staged::value, Plain::value>(p, staged, plain) > 0) return go(Staged{}, staged);
  }
  go(Plain{}, plain);
}

// Programmatic dependent launches (compute capability 9.0 and later: launch_dependent). A kernel so launched may
// start before the kernel ahead of it on the stream has finished: its blocks take free SMs as soon as every block of
// that one has said so (launch_dependents), and wait there for its results (wait_for_primary), where they would
// otherwise be launched only once it had finished. Used twice:
// - A norm's backward is two kernels: the backward kernel, then the weight's gradient summed over rows (weight_grads
//   or column_sums), which waits for the backward kernel's partial rows or statistics; weight_grads reads x and
//   grad_out (not results of the backward kernel) before it waits.
// - A training step's forward then its backward (the bench's full pass): the backward kernels (softmax's, the norms')
//   wait before reading anything, grad_out included: it may be the result of whatever kernel ran before. softmax's
//   and rmsnorm's forwards say so as they start, layernorm's as its blocks exit (layernorm.cu says why). The norms'
//   backward kernels say so only after their wait, so that weight_grads's early reads come after it too.
// A forward that says so at once lets whatever kernel is launched early after it start (kernellab's backwards, or
// another library's): by the launch's contract, that kernel touches no memory before its wait (the forward may still
// be reading its inputs from memory a later kernel will reuse).
// For a handful of rows (4 of 132 SMs busy) each wait had been a launch gap. Full passes, H200: softmax's bench
// medians at 4x8192 9.47 -> 8.06 us (float32) and 8.99 -> 7.78 (float16), from 0.96x and 0.93x of Liger-Kernel's to
// 1.13x and 1.09x, 16384x1024 to 4096x4096 -2% to -4%; spans (forward and backward launched back to back) of layernorm
// at 4x8192 -13% to -15%, at 4096x4096 -2% to -3%. Built with CUDA 12.3 and later only (KL_DEPENDENT_LAUNCH): a CUDA
// graph records such a launch as a programmatic edge from 12.3 on (edge data), and older toolkits (the matrix reaches
// back to 11.x) build the launches in stream order.
#if defined(CUDART_VERSION) && CUDART_VERSION >= 12030
#define KL_DEPENDENT_LAUNCH 1
#else
#define KL_DEPENDENT_LAUNCH 0
#endif

__device__ __forceinline__ void launch_dependents() {
#if KL_DEPENDENT_LAUNCH && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;");
#endif
}

// Waits until the kernel launched before this one (launch_dependent) has finished and its writes are visible; at
// once when it was launched without that.
__device__ __forceinline__ void wait_for_primary() {
#if KL_DEPENDENT_LAUNCH && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

// Whether Kernel holds wait_for_primary's instruction on the current device: its code is from PTX of compute
// capability 9.0 or later. An image built for an A100 (8.0+PTX) runs its compute_80 PTX, compiled at load time, on an
// H100: such a kernel could not wait, and is launched in stream order. Asked once per kernel and device.
template <auto Kernel>
inline bool waits_for_primary() {
  static DeviceCache cache;
  return cached_yes(cache, [] {
    if (compute_major() < 9) return 0;
    cudaFuncAttributes attributes = {};
    if (cudaFuncGetAttributes(&attributes, Kernel) != cudaSuccess) {
      cudaGetLastError();
      return -1;  // launched in stream order this time; asked again next time
    }
    return attributes.ptxVersion >= 90 ? 1 : 0;
  });
}

// A kernel as a type, for code that picks one at compile time and launches it through launch_dependent:
// go(kl::Kernel<&kernel<T, N>>{}), and in go, launch_backward_kernel<decltype(kernel)::value>(...).
template <auto K>
using Kernel = std::integral_constant<decltype(K), K>;

// Launches Kernel<<<grid, block, smem, stream>>>(args...) as a programmatic dependent launch of the kernel before it
// on the stream where it can wait for that one (KL_DEPENDENT_LAUNCH, waits_for_primary); elsewhere an ordinary launch.
template <auto Kernel, typename... Args>
inline void launch_dependent(dim3 grid, dim3 block, size_t smem, cudaStream_t stream, Args... args) {
#if !KL_DEPENDENT_LAUNCH
  Kernel<<<grid, block, smem, stream>>>(args...);
#else
  cudaLaunchAttribute early = {};
  early.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  early.val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t config = {};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = smem;
  config.stream = stream;
  config.attrs = &early;
  config.numAttrs = waits_for_primary<Kernel>() ? 1 : 0;
  cudaLaunchKernelEx(&config, Kernel, args...);
#endif
}

// out[which][c] = sum over p < parts of partial[which][p][c], in T. Block: 32 columns x 32 slices of parts.
template <typename T>
__global__ void __launch_bounds__(1024) column_sums(const float* __restrict__ partial, int parts, int cols,
                                                    T* __restrict__ out0, T* __restrict__ out1) {
  __shared__ float tile[32][33];
  const int lane = threadIdx.x % 32, slice = threadIdx.x / 32;
  const int c = blockIdx.x * 32 + lane;
  const float* in = partial + int64_t(blockIdx.y) * parts * cols;
  float s = 0.f;
  wait_for_primary();  // the partial rows are the backward kernel's
  if (c < cols) {
    for (int p = slice; p < parts; p += 32) s += in[int64_t(p) * cols + c];
  }
  tile[slice][lane] = s;
  __syncthreads();
  if (slice == 0 && c < cols) {
    float total = 0.f;
#pragma unroll
    for (int j = 0; j < 32; ++j) total += tile[j][lane];
    (blockIdx.y == 0 ? out0 : out1)[c] = from_float<T>(total);
  }
}

// The same sums when the partial rows are few (a handful of rows: a grid of a few blocks): a thread per
// column adds them in turn, coalesced across the warp; no shared memory, no idle slices.
template <typename T>
__global__ void __launch_bounds__(256) column_sums_serial(const float* __restrict__ partial, int parts, int cols,
                                                          T* __restrict__ out0, T* __restrict__ out1) {
  const int c = blockIdx.x * 256 + threadIdx.x;
  if (c >= cols) return;
  const float* in = partial + int64_t(blockIdx.y) * parts * cols + c;
  float s = 0.f;
  wait_for_primary();
  for (int p = 0; p < parts; ++p) s += in[int64_t(p) * cols];
  (blockIdx.y == 0 ? out0 : out1)[c] = from_float<T>(s);
}

// A handful of rows (decoding) asks for no partial rows: the backward kernel stores each row's statistics
// (mean and rstd; a mean of 0 for RMSNorm) and this kernel adds the weight's gradient up from x and grad_out
// themselves, still in L2 (the backward kernel has just read them): dw = sum over rows of grad_out * xhat, and
// db = sum over rows of grad_out when db is given. A thread per column; the rows' loads issued together.
// On the H100 (4 rows of 8192) the partial rows had the backward kernel storing twice (fp32) to four times
// (fp16) the bytes of grad_x, and column_sums reading them back: what torch.compile's backward does not do.
template <typename T>
__global__ void __launch_bounds__(256) weight_grads(const T* __restrict__ dy, const T* __restrict__ x,
                                                    const float2* __restrict__ stats, int rows, int cols,
                                                    T* __restrict__ dw, T* __restrict__ db) {
  const int c = blockIdx.x * 256 + threadIdx.x;
  if (c >= cols) return;
  float gw = 0.f, gb = 0.f;
  // Four rows at a time, their loads issued before any is used (`#pragma unroll` left a handful of rows to a
  // remainder loop of one row, and one L2 round trip, per turn: 2.2 us for 4 rows of 8192 on the H100).
  const T* pdy = dy + c;
  const T* px = x + c;
  T g[4], v[4];
  auto load = [&](int r0) {
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const bool in = r0 + j < rows;
      g[j] = in ? pdy[j * int64_t(cols)] : from_float<T>(0.f);
      v[j] = in ? px[j * int64_t(cols)] : from_float<T>(0.f);
    }
  };
  load(0);  // inputs of the backward kernel: read while it runs (launch_dependent)
  wait_for_primary();  // the statistics are its results
#pragma unroll 1
  for (int r0 = 0; r0 < rows; r0 += 4) {
    if (r0 > 0) load(r0);
    float2 st[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) st[j] = r0 + j < rows ? stats[r0 + j] : make_float2(0.f, 0.f);
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const float gf = to_float(g[j]);
      gw = fmaf(gf, (to_float(v[j]) - st[j].x) * st[j].y, gw);
      gb += gf;
    }
    pdy += 4 * int64_t(cols);
    px += 4 * int64_t(cols);
  }
  dw[c] = from_float<T>(gw);
  if (db != nullptr) db[c] = from_float<T>(gb);
}

// A backward plan whose weight gradients come from row statistics (weight_grads) instead of partial rows and
// column_sums: at most 32 rows, 16-byte packs, in registers at up to 4 packs a thread (the kernels compiled with
// that path, Sums::kStats; a statistics branch in every variant had ptxas spill 20 more bytes in rmsnorm's
// <float, 4, 8>, whose 2048x14336 backward went from 134 to 146 us on the H100).
constexpr int64_t kRowStatsMaxRows = 32;
constexpr int kRowStatsMaxPer = 4;
inline bool backward_uses_stats(const RowPlan& p, int64_t rows) {
  return rows <= kRowStatsMaxRows && p.pack > 1 && p.per_thread >= 1 && p.per_thread <= kRowStatsMaxPer;
}

// Calls f(n, per, sums), std::integral_constants of the pack size, the packs per thread and the Sums, for the
// backward kernel variant of this plan: kStats for a handful of rows (backward_uses_stats), kBlockRows when a block
// holds several rows (a thread then holds at most 16 elements: plan_backward_rows; WIDE: 2-byte types up to 32,
// plan_layernorm_backward's `wide`) or the rows are not in 16-byte packs, else kOneRow.
template <typename T, bool WIDE = false, typename F>
void dispatch_backward(const RowPlan& p, bool stats, F&& f) {
  using BlockRows = std::integral_constant<Sums, Sums::kBlockRows>;
  if (p.pack == 1) {
    dispatch_per_thread(p.per_thread, [&](auto per) { f(std::integral_constant<int, 1>{}, per, BlockRows{}); });
    return;
  }
  constexpr int N = kPack16<T>;
  dispatch_per_thread<32 / N>(p.per_thread, [&](auto per) {
    constexpr int PER = decltype(per)::value;
    const std::integral_constant<int, N> n;
    if constexpr (PER >= 1 && PER <= kRowStatsMaxPer) {
      if (stats) return f(n, per, std::integral_constant<Sums, Sums::kStats>{});
    }
    if constexpr (N * PER <= 16 || (WIDE && N == 8)) {
      if (p.rows_per_block > 1) return f(n, per, BlockRows{});
    }
    f(n, per, std::integral_constant<Sums, Sums::kOneRow>{});
  });
}

// Floats of a norm's backward workspace: partial rows (`partial_floats`), or a float2 of statistics per row.
inline int64_t backward_workspace(const RowPlan& p, int64_t rows, int64_t partial_floats) {
  return backward_uses_stats(p, rows) ? 2 * rows : partial_floats;
}

// Launches a norm's backward kernel, Kernel<<<grid, the plan's threads, smem, stream>>>(args...). Streamed rows
// (per_thread 0) add their sums into the workspace `ws`, whose first `zeroed` floats are zeroed first: after that
// memset, an ordinary launch. Otherwise early, after the kernel before it (launch_dependent).
template <auto Kernel, typename... Args>
inline void launch_backward_kernel(const RowPlan& p, int grid, size_t smem, float* ws, int64_t zeroed,
                                   cudaStream_t stream, Args... args) {
  if (p.per_thread == 0) {
    cudaMemsetAsync(ws, 0, zeroed * sizeof(float), stream);
    Kernel<<<grid, p.threads(), smem, stream>>>(args...);
  } else {
    launch_dependent<Kernel>(dim3(grid), dim3(p.threads()), smem, stream, args...);
  }
}

// out0 (and out1 when outputs == 2) = the column sums of `parts` partial rows of cols floats each.
template <typename T>
void launch_column_sums(const float* partial, int parts, int cols, T* out0, T* out1, int outputs,
                        cudaStream_t stream) {
  const unsigned y = static_cast<unsigned>(outputs);
  if (parts <= 32) {
    launch_dependent<column_sums_serial<T>>(dim3(static_cast<unsigned>((cols + 255) / 256), y), dim3(256), 0,
                                            stream, partial, parts, cols, out0, out1);
  } else {
    launch_dependent<column_sums<T>>(dim3(static_cast<unsigned>((cols + 31) / 32), y), dim3(1024), 0, stream,
                                     partial, parts, cols, out0, out1);
  }
}

// A norm backward's last step: the weight's gradient (and the bias's, when db is given) from its workspace,
// the rows' statistics through weight_grads (`stats`: backward_uses_stats) or `parts` partial rows through
// column_sums.
template <typename T>
void launch_weight_grads(bool stats, const T* dy, const T* x, const float* ws, int parts, int64_t rows, int64_t cols,
                         T* dw, T* db, cudaStream_t stream) {
  const int n = static_cast<int>(cols);
  if (stats) {
    launch_dependent<weight_grads<T>>(dim3(static_cast<unsigned>((n + 255) / 256)), dim3(256), 0, stream, dy, x,
                                      reinterpret_cast<const float2*>(ws), static_cast<int>(rows), n, dw, db);
  } else {
    launch_column_sums<T>(ws, parts, n, dw, db != nullptr ? db : dw, db != nullptr ? 2 : 1, stream);
  }
}

}  // namespace kl
