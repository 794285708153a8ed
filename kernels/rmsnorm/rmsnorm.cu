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

template <typename T, int N, int PER>
__global__ void __launch_bounds__(kl::row_block_limit<N, PER>())
    rmsnorm_kernel(const T* __restrict__ x, const T* __restrict__ w, T* __restrict__ y, int64_t rows, int64_t cols,
                   float eps, int shift) {
  using P = kl::Pack<T, N>;
  const kl::RowThread t = kl::row_thread(shift);
  const bool valid = t.row < rows;
  const int64_t offset = valid ? t.row * cols : 0;
  const kl::RowPacks<P, PER> row(reinterpret_cast<const P*>(x + offset), static_cast<int>(cols / N), t, valid);
  const kl::RowVector<P, PER> weight(reinterpret_cast<const P*>(w), row);
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
  const kl::RowPlan plan = kl::plan_rows(rows, cols, kl::kPack16<T>, aligned, kl::sm_count());
  const dim3 grid(static_cast<unsigned>(plan.blocks));
  if (plan.pack == 1) {
    // Unaligned rows or a width that is not a multiple of the pack: element by element.
    kl::dispatch_per_thread(plan.per_thread, [&](auto per) {
      rmsnorm_kernel<T, 1, decltype(per)::value>
          <<<grid, plan.threads(), 0, stream>>>(x, w, y, rows, cols, eps, plan.shift);
    });
  } else {
    kl::dispatch_per_thread(plan.per_thread, [&](auto per) {
      rmsnorm_kernel<T, kl::kPack16<T>, decltype(per)::value>
          <<<grid, plan.threads(), 0, stream>>>(x, w, y, rows, cols, eps, plan.shift);
    });
  }
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
