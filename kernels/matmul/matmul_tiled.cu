// Tiled matmul on the CUDA cores, for teaching: each block stages a 64x16 slice of A and a 16x64
// slice of B in shared memory, and each thread accumulates a 4x4 patch of C in registers, so every
// value loaded from global memory is used 64 times. No tensor cores, no pipelining: compare its
// speed with matmul_tensorcore.cu to see what those are worth.
#include "kernellab.cuh"
#include "matmul.h"

namespace {

constexpr int kTile = 64, kDepth = 16, kThreads = 256;

template <typename T>
__global__ void __launch_bounds__(kThreads)
    matmul_tiled_kernel(const T* __restrict__ a, const T* __restrict__ b, T* __restrict__ c, int m, int n, int k) {
  // A is stored transposed (k-major) so that a thread's four rows are one broadcast-friendly read.
  __shared__ float as[kDepth][kTile + 1];  // +1: the transposing stores spread over banks
  __shared__ float bs[kDepth][kTile];
  const int row0 = blockIdx.y * kTile, col0 = blockIdx.x * kTile;
  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
  float acc[4][4] = {};
  for (int k0 = 0; k0 < k; k0 += kDepth) {
    // 64x16 elements of each operand, 4 per thread; outside the matrices reads as zero.
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int e = threadIdx.x + i * kThreads;
      const int ar = e / kDepth, ac = e % kDepth;  // A: consecutive threads walk along k
      const int br = e / kTile, bc = e % kTile;    // B: consecutive threads walk along n
      const int gr = row0 + ar, gk = k0 + ac;
      as[ac][ar] = (gr < m && gk < k) ? kl::to_float(a[size_t(gr) * k + gk]) : 0.f;
      const int gkb = k0 + br, gc = col0 + bc;
      bs[br][bc] = (gkb < k && gc < n) ? kl::to_float(b[size_t(gkb) * n + gc]) : 0.f;
    }
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < kDepth; ++kk) {
      float x[4], y[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        x[i] = as[kk][ty + 16 * i];  // rows ty, ty+16, ...: a warp reads 2 distinct words (broadcast)
        y[i] = bs[kk][tx + 16 * i];  // columns tx, tx+16, ...: 16 consecutive words, no conflict
      }
#pragma unroll
      for (int i = 0; i < 4; ++i) {
#pragma unroll
        for (int j = 0; j < 4; ++j) acc[i][j] = fmaf(x[i], y[j], acc[i][j]);
      }
    }
    __syncthreads();
  }
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int r = row0 + ty + 16 * i;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int col = col0 + tx + 16 * j;
      if (r < m && col < n) c[size_t(r) * n + col] = kl::from_float<T>(acc[i][j]);
    }
  }
}

template <typename T>
cudaError_t launch(const T* a, const T* b, T* c, int m, int n, int k, cudaStream_t stream) {
  if (m == 0 || n == 0) return cudaSuccess;
  const dim3 grid((n + kTile - 1) / kTile, (m + kTile - 1) / kTile);
  matmul_tiled_kernel<T><<<grid, kThreads, 0, stream>>>(a, b, c, m, n, k);
  return cudaGetLastError();
}

}  // namespace

cudaError_t launch_matmul_tiled(const __half* a, const __half* b, __half* c, int m, int n, int k, cudaStream_t stream) {
  return launch(a, b, c, m, n, k, stream);
}
cudaError_t launch_matmul_tiled(const __nv_bfloat16* a, const __nv_bfloat16* b, __nv_bfloat16* c, int m, int n, int k,
                                cudaStream_t stream) {
  return launch(a, b, c, m, n, k, stream);
}
