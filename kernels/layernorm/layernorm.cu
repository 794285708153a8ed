// LayerNorm with weight and bias: one block per row, 16-byte loads, the row kept in registers when
// it fits. Mean and variance come from one reduction of (count, mean, M2) triples merged with
// Chan's formula, which stays accurate where sum and sum-of-squares would cancel.
#include "kernellab.cuh"
#include "layernorm.h"
#include "rowwise.cuh"

namespace {

struct Moments {
  float n = 0.f, mean = 0.f, m2 = 0.f;  // count, mean, sum of squared deviations

  __device__ static Moments combine(Moments a, Moments b) {
    const float n = a.n + b.n;
    if (n == 0.f) return {};
    const float delta = b.mean - a.mean, wb = b.n / n;
    return {n, a.mean + delta * wb, a.m2 + b.m2 + delta * delta * a.n * wb};
  }
  __device__ Moments shfl_xor(int mask) const {
    return {kl::shfl_xor(n, mask), kl::shfl_xor(mean, mask), kl::shfl_xor(m2, mask)};
  }
};

template <typename T, int N>
__device__ __forceinline__ Moments pack_moments(const kl::Pack<T, N>& p) {
  float sum = 0.f;
#pragma unroll
  for (int j = 0; j < N; ++j) sum += kl::to_float(p.v[j]);
  const float mean = sum / N;
  float m2 = 0.f;
#pragma unroll
  for (int j = 0; j < N; ++j) {
    const float d = kl::to_float(p.v[j]) - mean;
    m2 += d * d;
  }
  return {float(N), mean, m2};
}

template <typename T, int N>
__device__ __forceinline__ kl::Pack<T, N> normalized(const kl::Pack<T, N>& p, const kl::Pack<T, N>& w,
                                                     const kl::Pack<T, N>& b, float mean, float rstd) {
  kl::Pack<T, N> o;
#pragma unroll
  for (int j = 0; j < N; ++j) {
    o.v[j] = kl::from_float<T>((kl::to_float(p.v[j]) - mean) * rstd * kl::to_float(w.v[j]) + kl::to_float(b.v[j]));
  }
  return o;
}

template <typename T, int N, int CACHE>
__global__ void __launch_bounds__(kl::kRowMaxThreads)
    layernorm_kernel(const T* __restrict__ x, const T* __restrict__ w, const T* __restrict__ b, T* __restrict__ y,
                     int64_t cols, float eps) {
  using P = kl::Pack<T, N>;
  const kl::RowPacks<P, CACHE> row(reinterpret_cast<const P*>(x + blockIdx.x * cols), static_cast<int>(cols / N));
  Moments state;
  row.for_each([&](const P& p, int) { state = Moments::combine(state, pack_moments(p)); });
  const Moments total = kl::block_reduce(state);
  const float rstd = rsqrtf(total.m2 / total.n + eps);
  const P* pw = reinterpret_cast<const P*>(w);
  const P* pb = reinterpret_cast<const P*>(b);
  P* out = reinterpret_cast<P*>(y + blockIdx.x * cols);
  row.for_each([&](const P& p, int k) { out[k] = normalized(p, pw[k], pb[k], total.mean, rstd); });
}

template <typename T>
cudaError_t launch(const T* x, const T* w, const T* b, T* y, int64_t rows, int64_t cols, float eps,
                   cudaStream_t stream) {
  if (rows == 0 || cols == 0) return cudaSuccess;
  const bool aligned = kl::aligned16(x) && kl::aligned16(w) && kl::aligned16(b) && kl::aligned16(y);
  const kl::RowPlan plan = kl::plan_rows(cols, kl::kPack16<T>, aligned);
  const dim3 grid(static_cast<unsigned>(rows));
  if (plan.pack == 1) {
    layernorm_kernel<T, 1, 0><<<grid, plan.threads, 0, stream>>>(x, w, b, y, cols, eps);
  } else {
    kl::dispatch_cache(plan.cache, [&](auto cache) {
      layernorm_kernel<T, kl::kPack16<T>, decltype(cache)::value>
          <<<grid, plan.threads, 0, stream>>>(x, w, b, y, cols, eps);
    });
  }
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
