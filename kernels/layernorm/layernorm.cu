// LayerNorm with weight and bias. A group of threads per row (kernels/_common/rowwise.cuh): a warp or
// less for short rows, several rows per block; up to a block of 1024 for long ones. The row is read
// once into registers as 16-byte packs. Mean and variance come from one reduction of the sums of d and d^2,
// d = x - x[0] (the row's first element): shifted by a value of the row, E[d^2] - E[d]^2 loses no digits
// to a large mean (the cancellation of E[x^2] - E[x]^2), and one reduction waits half as long as two.
// Rows too long for registers are streamed: two reads (statistics, output), the second mostly from L2.
#include "kernellab.cuh"
#include "layernorm.h"
#include "rowwise.cuh"

namespace {

// Adds the pack's d = x - shift and d^2 to s.
template <typename T, int N>
__device__ __forceinline__ void add_shifted(const kl::Pack<T, N>& p, float shift, float2& s) {
#pragma unroll
  for (int j = 0; j < N; ++j) {
    const float d = kl::to_float(p.v[j]) - shift;
    s.x += d;
    s.y = fmaf(d, d, s.y);
  }
}

template <typename T, int N>
__device__ __forceinline__ kl::Pack<T, N> normalized(const kl::Pack<T, N>& p, const kl::Pack<T, N>& w,
                                                     const kl::Pack<T, N>& b, float mean, float rstd) {
  kl::Pack<T, N> o;
#pragma unroll
  for (int j = 0; j < N; ++j) {
    o.v[j] = kl::from_float<T>(fmaf((kl::to_float(p.v[j]) - mean) * rstd, kl::to_float(w.v[j]), kl::to_float(b.v[j])));
  }
  return o;
}

// Unlike softmax's and rmsnorm's forwards, this one does not call kl::launch_dependents as it starts: its backward,
// launched early (kl::launch_dependent), then starts as this kernel's blocks exit. Where it said so at once, the full
// pass at 16384x1024 float16 (the backward's 3 blocks of 256 an SM) went 60.1 -> 74.5 us and bfloat16 64.4 -> 65.9;
// as its blocks exit, 59.3 and 63.7, and the rest as fast as with the early word (4x8192 float16 7.65 -> 6.62 us,
// 4096x4096 -3%). Spans, H200.
template <typename T, int N, int PER, bool FEW>
__global__ void __launch_bounds__(kl::row_block_limit<N, PER>())
    layernorm_kernel(const T* __restrict__ x, const T* __restrict__ w, const T* __restrict__ b, T* __restrict__ y,
                     int64_t rows, int64_t cols, float eps, int shift) {
  using P = kl::Pack<T, N>;
  const kl::RowThread t = kl::row_thread(shift);
  const bool valid = t.row < rows;
  const int64_t offset = valid ? t.row * cols : 0;
  const kl::RowPacks<P, PER> row(reinterpret_cast<const P*>(x + offset), static_cast<int>(cols / N), t, valid);
  const kl::RowVector<P, PER, FEW> weight(reinterpret_cast<const P*>(w), row), bias(reinterpret_cast<const P*>(b), row);
  const float inv_cols = 1.f / static_cast<float>(cols);
  const float x0 = valid ? kl::to_float(x[offset]) : 0.f;
  float2 s = {0.f, 0.f};
  row.for_each([&](const P& p, int, int) { add_shifted(p, x0, s); });
  s = kl::group_sum2(s, t.group);
  const float mean_d = s.x * inv_cols;  // mean - x0
  const float mean = x0 + mean_d, rstd = rsqrtf(fmaxf(s.y * inv_cols - mean_d * mean_d, 0.f) + eps);
  P* out = reinterpret_cast<P*>(y + offset);
  row.for_each([&](const P& p, int k, int i) { kl::store_pack(out + k, normalized(p, weight(k, i), bias(k, i), mean, rstd)); });
}

template <typename T>
cudaError_t launch(const T* x, const T* w, const T* b, T* y, int64_t rows, int64_t cols, float eps,
                   cudaStream_t stream) {
  if (rows == 0 || cols == 0) return cudaSuccess;
  const bool aligned = kl::aligned16(x) && kl::aligned16(w) && kl::aligned16(b) && kl::aligned16(y);
  const kl::RowPlan plan = kl::plan_norm_forward<T>(rows, cols, aligned, kl::sm_count());
  kl::dispatch_forward<T>(plan, [&](auto n, auto per, auto few) {
    kl::launch_rows<&layernorm_kernel<T, decltype(n)::value, decltype(per)::value, decltype(few)::value>>(
        plan, rows, stream, x, w, b, y, rows, cols, eps);
  });
  return cudaGetLastError();
}

}  // namespace

cudaError_t launch_layernorm(const float* x, const float* w, const float* b, float* y, int64_t rows, int64_t cols,
                             float eps, cudaStream_t stream) {
  return launch(x, w, b, y, rows, cols, eps, stream);
}
cudaError_t launch_layernorm(const __half* x, const __half* w, const __half* b, __half* y, int64_t rows, int64_t cols,
                             float eps, cudaStream_t stream) {
  return launch(x, w, b, y, rows, cols, eps, stream);
}
cudaError_t launch_layernorm(const __nv_bfloat16* x, const __nv_bfloat16* w, const __nv_bfloat16* b, __nv_bfloat16* y,
                             int64_t rows, int64_t cols, float eps, cudaStream_t stream) {
  return launch(x, w, b, y, rows, cols, eps, stream);
}
