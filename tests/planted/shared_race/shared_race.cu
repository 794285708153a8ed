// PLANTED BUG: the load from shared memory reads another warp's element with no __syncthreads()
// after the stores, a read-after-write hazard across warps.
#include "shared_race.h"

namespace {

__global__ void shared_race_kernel(const float* __restrict__ x, float* __restrict__ y) {
  __shared__ float staged[kRaceBlock];
  const int64_t base = int64_t(blockIdx.x) * kRaceBlock;
  staged[threadIdx.x] = x[base + threadIdx.x];
  // Missing: __syncthreads();
  y[base + threadIdx.x] = staged[(threadIdx.x + 32) % kRaceBlock];
}

}  // namespace

cudaError_t launch_shared_race(const float* x, float* y, int64_t n, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  shared_race_kernel<<<static_cast<unsigned>(n / kRaceBlock), kRaceBlock, 0, stream>>>(x, y);
  return cudaGetLastError();
}
