// Row softmax: one block per row, 16-byte loads, and a single pass that keeps a running
// (max, sum of exponentials) pair, merged across the block with warp shuffles. Exponentials are
// base 2 on x * log2(e): one multiply and one ex2 instruction each.
#include "kernellab.cuh"
#include "rowwise.cuh"
#include "softmax.h"

namespace {

struct MaxSum {
  float max = -INFINITY;  // of x * log2(e)
  float sum = 0.f;        // of exp2(x * log2(e) - max)

  __device__ static MaxSum combine(MaxSum a, MaxSum b) {
    const float m = fmaxf(a.max, b.max);
    if (m == -INFINITY) return {m, 0.f};  // both empty: exp2(-inf - -inf) would be NaN
    return {m, a.sum * kl::fast_exp2(a.max - m) + b.sum * kl::fast_exp2(b.max - m)};
  }
  __device__ MaxSum shfl_xor(int mask) const { return {kl::shfl_xor(max, mask), kl::shfl_xor(sum, mask)}; }
};

template <typename T, int N>
__device__ __forceinline__ MaxSum pack_state(const kl::Pack<T, N>& p) {
  float t[N], m = -INFINITY;
#pragma unroll
  for (int j = 0; j < N; ++j) {
    t[j] = kl::to_float(p.v[j]) * kl::kLog2e;
    m = fmaxf(m, t[j]);
  }
  if (m == -INFINITY) return {};
  float s = 0.f;
#pragma unroll
  for (int j = 0; j < N; ++j) s += kl::fast_exp2(t[j] - m);
  return {m, s};
}

template <typename T, int N>
__device__ __forceinline__ kl::Pack<T, N> normalized(const kl::Pack<T, N>& p, MaxSum row, float inv_sum) {
  kl::Pack<T, N> o;
#pragma unroll
  for (int j = 0; j < N; ++j) {
    o.v[j] = kl::from_float<T>(kl::fast_exp2(kl::to_float(p.v[j]) * kl::kLog2e - row.max) * inv_sum);
  }
  return o;
}

template <typename T, int N, int CACHE>
__global__ void __launch_bounds__(kl::kRowMaxThreads) softmax_kernel(const T* __restrict__ x, T* __restrict__ y,
                                                                    int64_t cols) {
  using P = kl::Pack<T, N>;
  const kl::RowPacks<P, CACHE> row(reinterpret_cast<const P*>(x + blockIdx.x * cols), static_cast<int>(cols / N));
  MaxSum state;
  row.for_each([&](const P& p, int) { state = MaxSum::combine(state, pack_state(p)); });
  const MaxSum total = kl::block_reduce(state);
  const float inv_sum = 1.f / total.sum;
  P* out = reinterpret_cast<P*>(y + blockIdx.x * cols);
  row.for_each([&](const P& p, int k) { out[k] = normalized(p, total, inv_sum); });
}

template <typename T>
cudaError_t launch(const T* x, T* y, int64_t rows, int64_t cols, cudaStream_t stream) {
  if (rows == 0 || cols == 0) return cudaSuccess;
  const kl::RowPlan plan = kl::plan_rows(cols, kl::kPack16<T>, kl::aligned16(x) && kl::aligned16(y));
  const dim3 grid(static_cast<unsigned>(rows));
  if (plan.pack == 1) {
    softmax_kernel<T, 1, 0><<<grid, plan.threads, 0, stream>>>(x, y, cols);
  } else {
    kl::dispatch_cache(plan.cache, [&](auto cache) {
      softmax_kernel<T, kl::kPack16<T>, decltype(cache)::value><<<grid, plan.threads, 0, stream>>>(x, y, cols);
    });
  }
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
