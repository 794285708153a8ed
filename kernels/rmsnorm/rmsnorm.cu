// RMSNorm with a weight, as LLMs use it: y = x / sqrt(mean(x^2) + eps) * w, accumulated in float32 and
// rounded once to the input's dtype. A group of threads per row (kernels/_common/rowwise.cuh): a warp
// or less for short rows, several rows per block; up to a block of 1024 for long ones. The row is read
// once into registers as 16-byte packs, its sum of squares reduced over the group, each output written
// once. Rows too long for registers are streamed: two reads, the second mostly from L2.
#include "kernellab.cuh"
#include "rmsnorm.h"
#include "rowwise.cuh"

namespace {

template <typename T, int N>
__device__ __forceinline__ float pack_squares(const kl::Pack<T, N>& p) {
  float s = 0.f;
#pragma unroll
  for (int j = 0; j < N; ++j) {
    const float v = kl::to_float(p.v[j]);
    s = fmaf(v, v, s);
  }
  return s;
}

template <typename T, int N>
__device__ __forceinline__ kl::Pack<T, N> normalized(const kl::Pack<T, N>& p, const kl::Pack<T, N>& w, float rstd) {
  kl::Pack<T, N> o;
#pragma unroll
  for (int j = 0; j < N; ++j) o.v[j] = kl::from_float<T>(kl::to_float(p.v[j]) * rstd * kl::to_float(w.v[j]));
  return o;
}

// MIN_BLOCKS: 0 leaves ptxas free (up to the block limit's registers); kHeld48, for blocks of at most kHeldThreads,
// holds a thread to 48 registers (65536 / (5 * 256)). bfloat16 rows at 32 elements a thread get it, in such blocks.
// Left free, ptxas for sm_90 keeps the first pass's converted floats for the second (52 registers, 4 blocks of 256
// an SM); held to 48 it converts again, spills nothing, and an SM holds 5 (for sm_80 it needs under 48 anyway,
// and the hold changes nothing). H200, kernel times with 256-thread blocks:
// 8192x5120 47.5 -> 44.2 us, 4096x4096 19.9 -> 19.4 us. float32 at 48 spills and lost (16384x1024 35.4 -> 36.1 us);
// float16 needs 38 registers anyway.
constexpr int kHeld48 = 5, kHeldThreads = 256;

template <typename T, int N, int PER, bool FEW, int MIN_BLOCKS = 0>
__global__ void __launch_bounds__(MIN_BLOCKS > 1 ? kHeldThreads : kl::row_block_limit<N, PER>(), MIN_BLOCKS)
    rmsnorm_kernel(const T* __restrict__ x, const T* __restrict__ w, T* __restrict__ y, int64_t rows, int64_t cols,
                   float eps, int shift) {
  kl::launch_dependents();  // a backward may start early, and waits for this kernel's results (kl::launch_dependent)
  using P = kl::Pack<T, N>;
  const kl::RowThread t = kl::row_thread(shift);
  const bool valid = t.row < rows;
  const int64_t offset = valid ? t.row * cols : 0;
  const kl::RowPacks<P, PER> row(reinterpret_cast<const P*>(x + offset), static_cast<int>(cols / N), t, valid);
  const kl::RowVector<P, PER, FEW> weight(reinterpret_cast<const P*>(w), row);
  float squares = 0.f;
  row.for_each([&](const P& p, int, int) { squares += pack_squares(p); });
  const float rstd = rsqrtf(kl::group_reduce<kl::Sum>(squares, t.group) / static_cast<float>(cols) + eps);
  P* out = reinterpret_cast<P*>(y + offset);
  row.for_each([&](const P& p, int k, int i) { kl::store_pack(out + k, normalized(p, weight(k, i), rstd)); });
}

template <typename T>
cudaError_t launch(const T* x, const T* w, T* y, int64_t rows, int64_t cols, float eps, cudaStream_t stream) {
  if (rows == 0 || cols == 0) return cudaSuccess;
  const bool aligned = kl::aligned16(x) && kl::aligned16(w) && kl::aligned16(y);
  const kl::RowPlan plan = kl::plan_norm_forward<T>(rows, cols, aligned, kl::sm_count());
  kl::dispatch_forward<T>(plan, [&](auto n, auto per, auto few) {
    constexpr int N = decltype(n)::value, PER = decltype(per)::value;
    constexpr bool FEW = decltype(few)::value;
    // A handful of rows (FEW) are spread over 512 threads a row: never in blocks of kHeldThreads.
    if constexpr (std::is_same_v<T, __nv_bfloat16> && N * PER == 32 && !FEW) {
      if (plan.threads() <= kHeldThreads) {
        return kl::launch_rows<&rmsnorm_kernel<T, N, PER, FEW, kHeld48>>(plan, rows, stream, x, w, y, rows, cols, eps);
      }
    }
    kl::launch_rows<&rmsnorm_kernel<T, N, PER, FEW>>(plan, rows, stream, x, w, y, rows, cols, eps);
  });
  return cudaGetLastError();
}

}  // namespace

cudaError_t launch_rmsnorm(const float* x, const float* w, float* y, int64_t rows, int64_t cols, float eps,
                           cudaStream_t stream) {
  return launch(x, w, y, rows, cols, eps, stream);
}
cudaError_t launch_rmsnorm(const __half* x, const __half* w, __half* y, int64_t rows, int64_t cols, float eps,
                           cudaStream_t stream) {
  return launch(x, w, y, rows, cols, eps, stream);
}
cudaError_t launch_rmsnorm(const __nv_bfloat16* x, const __nv_bfloat16* w, __nv_bfloat16* y, int64_t rows,
                           int64_t cols, float eps, cudaStream_t stream) {
  return launch(x, w, y, rows, cols, eps, stream);
}
