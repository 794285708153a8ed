// c = a + b. Memory-bound: 16-byte loads and stores, a grid-stride loop over a grid sized to fill
// the GPU, and four independent loads per operand in flight before the first add.
#include "kernellab.cuh"
#include "vector_add.h"

namespace {

constexpr int kThreads = 256;
constexpr int kUnroll = 4;

template <typename T, int N>
__device__ __forceinline__ kl::Pack<T, N> add(const kl::Pack<T, N>& x, const kl::Pack<T, N>& y) {
  kl::Pack<T, N> z;
#pragma unroll
  for (int j = 0; j < N; ++j) z.v[j] = kl::from_float<T>(kl::to_float(x.v[j]) + kl::to_float(y.v[j]));
  return z;
}

// N elements per access: 16 bytes when the pointers allow it, else 1.
template <typename T, int N>
__global__ void __launch_bounds__(kThreads) vector_add_kernel(const T* __restrict__ a, const T* __restrict__ b,
                                                              T* __restrict__ c, int64_t n) {
  using P = kl::Pack<T, N>;
  const P* pa = reinterpret_cast<const P*>(a);
  const P* pb = reinterpret_cast<const P*>(b);
  P* pc = reinterpret_cast<P*>(c);
  const int64_t packs = n / N;
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  const int64_t first = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  int64_t i = first;
  for (; i + (kUnroll - 1) * stride < packs; i += kUnroll * stride) {
    P x[kUnroll], y[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      x[u] = pa[i + u * stride];
      y[u] = pb[i + u * stride];
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) pc[i + u * stride] = add(x[u], y[u]);
  }
  for (; i < packs; i += stride) pc[i] = add(pa[i], pb[i]);
  // The last n % N elements, one per thread.
  const int64_t tail = packs * N + first;
  if (tail < n) c[tail] = kl::from_float<T>(kl::to_float(a[tail]) + kl::to_float(b[tail]));
}

template <typename T>
cudaError_t launch(const T* a, const T* b, T* c, int64_t n, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  constexpr int V = kl::kPack16<T>;
  const bool vectorized = kl::aligned16(a) && kl::aligned16(b) && kl::aligned16(c);
  const int64_t packs = vectorized ? n / V : n;
  // Enough blocks to fill every SM (8 x 256 threads each), no more: the loop covers the rest.
  const int64_t wanted = (packs + kThreads - 1) / kThreads;
  const int blocks = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(wanted, 8LL * kl::sm_count())));
  if (vectorized) {
    vector_add_kernel<T, V><<<blocks, kThreads, 0, stream>>>(a, b, c, n);
  } else {
    vector_add_kernel<T, 1><<<blocks, kThreads, 0, stream>>>(a, b, c, n);
  }
  return cudaGetLastError();
}

}  // namespace

cudaError_t launch_vector_add(const float* a, const float* b, float* c, int64_t n, cudaStream_t stream) {
  return launch(a, b, c, n, stream);
}
cudaError_t launch_vector_add(const __half* a, const __half* b, __half* c, int64_t n, cudaStream_t stream) {
  return launch(a, b, c, n, stream);
}
cudaError_t launch_vector_add(const __nv_bfloat16* a, const __nv_bfloat16* b, __nv_bfloat16* c, int64_t n,
                              cudaStream_t stream) {
  return launch(a, b, c, n, stream);
}
