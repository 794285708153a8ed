// PLANTED BUG: `i <= n` lets thread n write y[n], one element past the end of y.
#include "oob_write.h"

namespace {

__global__ void oob_write_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t n) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i <= n) y[i] = i < n ? 2.f * x[i] : 0.f;
}

}  // namespace

cudaError_t launch_oob_write(const float* x, float* y, int64_t n, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  const int threads = 256;
  const unsigned blocks = static_cast<unsigned>((n + threads) / threads);
  oob_write_kernel<<<blocks, threads, 0, stream>>>(x, y, n);
  return cudaGetLastError();
}
