// Row softmax. A group of threads per row (kernels/_common/rowwise.cuh): a warp or less for short rows,
// several rows per block; up to a block of 1024 for long ones. The row is read once into registers as
// 16-byte packs; each thread's (max, sum of exponentials from its max) is combined over the group in one
// reduction (the sums rescaled to the larger max as they meet), then each output is written once (from the
// exponentials a thread kept, where it holds 16 elements or fewer: keeps_exps).
// Exponentials are base 2 on x * log2(e) - max: one FMA and one ex2 instruction each. Rows too long
// for registers are streamed: one pass keeps a running (max, sum) per thread, a second writes. Rows whose max is
// beyond 2^30 / log2(e) (far: masks of -1e10 or of the lowest finite value) are written by far_row instead.
#include "kernellab.cuh"
#include "rowwise.cuh"
#include "softmax.h"

namespace {

template <typename T, int N>
__device__ __forceinline__ float pack_max(const kl::Pack<T, N>& p) {
  float m = -INFINITY;
#pragma unroll
  for (int j = 0; j < N; ++j) m = fmaxf(m, kl::to_float(p.v[j]));
  return m;
}

// exp2(x * log2(e) - scaled_max): e^(x - max), max times log2(e) given (scaled).
__device__ __forceinline__ float exp_scaled(float x, float scaled_max) {
  return kl::fast_exp2(fmaf(x, kl::kLog2e, -scaled_max));
}

// Sum of exp2(x * log2(e) - scaled_max) over the pack.
template <typename T, int N>
__device__ __forceinline__ float pack_exp_sum(const kl::Pack<T, N>& p, float scaled_max) {
  float s = 0.f;
#pragma unroll
  for (int j = 0; j < N; ++j) s += exp_scaled(kl::to_float(p.v[j]), scaled_max);
  return s;
}

template <typename T, int N>
__device__ __forceinline__ kl::Pack<T, N> normalized(const kl::Pack<T, N>& p, float scaled_max, float inv_sum) {
  kl::Pack<T, N> o;
#pragma unroll
  for (int j = 0; j < N; ++j) {
    o.v[j] = kl::from_float<T>(exp_scaled(kl::to_float(p.v[j]), scaled_max) * inv_sum);
  }
  return o;
}

// A max times log2(e) as exp2's argument wants it (s), rounded up: each exponential exp2(x * log2(e) - s) then comes
// out 2^err times e^(x - max), err = max * log2(e) - s <= 0, the same err for every one rescaled to s, which the
// normalization cancels; never above 1, even where err is far below 0, and the lowest finite value's s stays finite
// (-FLT_MAX). A share with no value (max -inf) keeps -inf; exp_shift makes that 0 for exp2.
__device__ __forceinline__ float scaled(float max) { return max == -INFINITY ? max : __fmul_ru(max, kl::kLog2e); }
__device__ __forceinline__ float exp_shift(float s) { return s == -INFINITY ? 0.f : s; }

// Below |s| = 2^30, err > -64 and the exponentials that matter stay normal floats. From there err reaches -128 and
// beyond (-2^103 at the lowest finite value), so that a row's exponentials may all come out 0: such a row (far: |max|
// >= 7.4e8) is written by far_row. Distinct values there are at least 64 apart, so that e^(x - max) is 1 at the max
// and below 2e-28 elsewhere; a thread this far below a near row's max adds its 0 to the sum, as it should.
constexpr float kFarScaled = 0x1p30f;
__device__ __forceinline__ bool is_far(float s) { return s != -INFINITY && !(fabsf(s) < kFarScaled); }

// Whether any row reduced alongside this thread's is far: its warp where groups are a warp or less, its block where
// several groups of warps share one, so that all threads reducing together take far_row's reductions.
__device__ __forceinline__ bool any_far(bool far, int group) {
  if (group >= static_cast<int>(blockDim.x)) return far;  // the same over the group, the whole block
  if (group <= 32) return __any_sync(0xffffffffu, far);
  return __syncthreads_or(far);
}

// A far row's softmax, as float32 has it: 1 / count at the values equal to the row's max, 0 elsewhere, and NaN
// everywhere in a row holding NaN or +inf, as for PyTorch. Written over what the kernel wrote there. The row is read
// again, three times (no registers held for this rare path), in the same packs per thread as the kernel's; two more
// reductions.
template <typename T, int N>
__device__ __noinline__ void far_row(const T* x, T* y, int64_t rows, int64_t cols, int shift, bool far) {
  using P = kl::Pack<T, N>;
  const kl::RowThread t = kl::row_thread(shift);
  const bool valid = t.row < rows;
  const int64_t offset = valid ? t.row * cols : 0;
  const kl::RowPacks<P, 0> row(reinterpret_cast<const P*>(x + offset), static_cast<int>(cols / N), t, valid);
  float max = -INFINITY;
  row.for_each([&](const P& p, int, int) { max = fmaxf(max, pack_max(p)); });
  max = kl::group_reduce<kl::Max>(max, t.group);
  float2 counts = make_float2(0.f, 0.f);  // values equal to the max, NaNs
  row.for_each([&](const P& p, int, int) {
#pragma unroll
    for (int j = 0; j < N; ++j) {
      const float v = kl::to_float(p.v[j]);
      counts.x += v == max ? 1.f : 0.f;
      counts.y += v != v ? 1.f : 0.f;
    }
  });
  counts = kl::group_sum2(counts, t.group);
  if (!far) return;
  const bool nan = max == INFINITY || counts.y > 0.f;
  const float hit = nan ? NAN : 1.f / counts.x, miss = nan ? NAN : 0.f;
  P* out = reinterpret_cast<P*>(y + offset);
  row.for_each([&](const P& p, int k, int) {
    P o;
#pragma unroll
    for (int j = 0; j < N; ++j) o.v[j] = kl::from_float<T>(kl::to_float(p.v[j]) == max ? hit : miss);
    kl::store_pack(out + k, o);
  });
}

// A thread's or group's share of a row: its max as scaled (s; -inf when it has no value above -inf) and the
// sum of exp2(x * log2(e) - s) over its values.
struct MaxSum {
  float max, sum;
};
__device__ __forceinline__ MaxSum shfl_xor(MaxSum v, int offset) {
  return {kl::shfl_xor(v.max, offset), kl::shfl_xor(v.sum, offset)};
}
__device__ __forceinline__ MaxSum combine(MaxSum a, MaxSum b) {
  const float m = fmaxf(a.max, b.max);
  if (m == -INFINITY) return {m, a.sum + b.sum};  // each 0, or NaN from a NaN among -infs (a NaN row, as for PyTorch)
  return {m, a.sum * kl::fast_exp2(a.max - m) + b.sum * kl::fast_exp2(b.max - m)};
}

// Whether a thread keeps its exponentials in registers for the output (one exp2 an element) rather than computing
// them again (two): where it holds at most kKeptExps elements, which plan_rows gives a handful of rows (spread over
// more threads) and short rows, not the large bench shapes (32 elements a thread). An SM's multi-function units do 16
// exp2 a cycle; with a handful of rows (decoding: one row of 512 threads per SM) the second 16 a thread were on the
// critical path. Kernel times, H200 (benchmarks/kernel_ab.py): 4x8192 float16 2.72 -> 2.65 us, float32 2.98 -> 2.94,
// bfloat16 2.78 -> 2.68; 64x4096 -2% to -4% (2 more registers at most, none spilled). At 32 elements (float16 <8, 4>:
// 32 -> 54 registers) it lost: 8192x5120 float16 42.5 -> 51.9 us, 2048x14336 31.2 -> 35.1. Tried for the kept path
// and left out: two reductions (the max, then the sum of exponentials against it, as Liger-Kernel does, with no exp2
// in the reductions): 4x8192 float16 2.62 -> 2.65 us, 32x8192 2.85 -> 2.95, 64x4096 2.57 -> 2.64. Also left out: at 32
// elements, float16's kept as __half2 pairs (16 registers; <8, 4> held to 32 registers, no spills): the bench shapes
// -0.9% to +0.4% (they wait on memory, not on the XU pipe), 600x4096 -5.7%, and one more rounding, which doubled the
// largest error (4096x4096 6.1e-5 -> 1.2e-4; results/h200-norms, 2026-11-30).
constexpr int kKeptExps = 16;
template <int N, int PER>
__host__ __device__ constexpr bool keeps_exps() {
  return PER > 0 && N * PER <= kKeptExps;
}

// __launch_bounds__'s blocks an SM must hold at once: 0 (none said) but for float32's kept path at 16 elements a
// thread (<4, 4>: 4x8192, decoding), 1. With far_row a call, ptxas otherwise held that variant to 32 registers,
// spilling kept exponentials across the reduction (36 -> 38 registers, as many allocated as before); said for every
// variant, 1 took the unaligned kept ones from 32 to 42 registers (3000x1026: +4% to +9%, H200).
template <typename T, int N, int PER>
constexpr int min_blocks() {
  return std::is_same_v<T, float> && N * PER == 16 ? 1 : 0;
}

template <typename T, int N, int PER>
__global__ void __launch_bounds__(kl::row_block_limit<N, PER>(), min_blocks<T, N, PER>())
    softmax_kernel(const T* __restrict__ x, T* __restrict__ y, int64_t rows, int64_t cols, int shift) {
  kl::launch_dependents();  // the backward may start, and waits for y (softmax_backward.cu)
  using P = kl::Pack<T, N>;
  const kl::RowThread t = kl::row_thread(shift);
  const bool valid = t.row < rows;
  const int64_t offset = valid ? t.row * cols : 0;
  const kl::RowPacks<P, PER> row(reinterpret_cast<const P*>(x + offset), static_cast<int>(cols / N), t, valid);
  float local = -INFINITY, sum = 0.f;
  constexpr bool kKept = keeps_exps<N, PER>();
  float e[kKept ? PER : 1][kKept ? N : 1];  // kKept: exp2(x * log2(e) - this thread's max), kept for the output
  if constexpr (PER > 0) {
    row.for_each([&](const P& p, int, int) { local = fmaxf(local, pack_max(p)); });
    const float m = exp_shift(scaled(local));
    if constexpr (kKept) {
      row.for_each([&](const P& p, int, int i) {
#pragma unroll
        for (int j = 0; j < N; ++j) {
          e[i][j] = exp_scaled(kl::to_float(p.v[j]), m);
          sum += e[i][j];
        }
      });
    } else {
      row.for_each([&](const P& p, int, int) { sum += pack_exp_sum(p, m); });
    }
  } else {
    // One read: a running max, the sum rescaled whenever it grows.
    float m = exp_shift(scaled(local));
    row.for_each([&](const P& p, int, int) {
      const float pm = pack_max(p);
      if (pm > local) {
        const float grown = scaled(pm);
        if (local != -INFINITY) sum *= kl::fast_exp2(m - grown);  // at -inf the sum is 0, or NaN (kept)
        local = pm;
        m = grown;
      }
      sum += pack_exp_sum(p, m);
    });
  }
  const float s = scaled(local);
  const MaxSum total =
      kl::group_combine(MaxSum{s, sum}, t.group, [](MaxSum a, MaxSum b) { return combine(a, b); });
  P* out = reinterpret_cast<P*>(y + offset);
  const bool far = is_far(total.max);
  const float m = exp_shift(total.max), inv_sum = 1.f / total.sum;
  if constexpr (kKept) {
    // exp2(x * log2(e) - m) = e * exp2(s - m), each at most 1, exactly 1 at the thread holding the max. A thread of
    // only -inf has e = 0 and no max: 0 (times inv_sum, so that a row of only -inf is NaN, as it is for PyTorch and
    // for the other path).
    const float scale = (local == -INFINITY ? 0.f : kl::fast_exp2(s - m)) * inv_sum;
    row.for_each([&](const P&, int k, int i) {
      P o;
#pragma unroll
      for (int j = 0; j < N; ++j) o.v[j] = kl::from_float<T>(e[i][j] * scale);
      kl::store_pack(out + k, o);
    });
  } else {
    row.for_each([&](const P& p, int k, int) { kl::store_pack(out + k, normalized(p, m, inv_sum)); });
  }
  if (any_far(far, t.group)) far_row<T, N>(x, y, rows, cols, shift, far);
}

template <typename T>
cudaError_t launch(const T* x, T* y, int64_t rows, int64_t cols, cudaStream_t stream) {
  if (rows == 0 || cols == 0) return cudaSuccess;
  const bool aligned = kl::aligned16(x) && kl::aligned16(y);
  const kl::RowPlan plan = kl::plan_rows(rows, cols, kl::kPack16<T>, aligned, kl::sm_count());
  kl::dispatch_forward<T>(plan, [&](auto n, auto per, auto) {
    kl::launch_rows<&softmax_kernel<T, decltype(n)::value, decltype(per)::value>>(plan, rows, stream, x, y, rows, cols);
  });
  return cudaGetLastError();
}

}  // namespace

cudaError_t launch_softmax(const float* x, float* y, int64_t rows, int64_t cols, cudaStream_t stream) {
  return launch(x, y, rows, cols, stream);
}
cudaError_t launch_softmax(const __half* x, __half* y, int64_t rows, int64_t cols, cudaStream_t stream) {
  return launch(x, y, rows, cols, stream);
}
cudaError_t launch_softmax(const __nv_bfloat16* x, __nv_bfloat16* y, int64_t rows, int64_t cols, cudaStream_t stream) {
  return launch(x, y, rows, cols, stream);
}
