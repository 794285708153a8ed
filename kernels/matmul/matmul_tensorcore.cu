// Tensor-core matmul: each block computes a 256x128 tile of C with 8 warps, each warp a 64x64
// patch built from m16n8k16 mma.sync instructions with fp32 accumulators (128 per thread). A and B
// stream through a 3-stage cp.async pipeline of 64-deep slices in shared memory, so global loads
// overlap the math; rows are padded by 16 bytes so that ldmatrix's eight row reads hit distinct banks.
// Shapes whose rows are not 16-byte multiples (k or n not a multiple of 8) take a slower path that
// fills the tiles with ordinary loads; everything else runs at full speed at any m, n, k.
// mma.sync is the Ampere instruction; on Hopper cuBLAS uses wgmma, which this kernel does not.
#include "matmul.h"
#include "mma.cuh"

namespace {

// A tile configuration: BM x BN of C per block, BK-deep slices of A and B, STAGES slices in
// flight, WARPS_M x WARPS_N warps each owning a 64x64 patch of the tile.
template <int BM_, int BN_, int BK_, int STAGES_, int WARPS_M_, int WARPS_N_>
struct Tiles {
  static constexpr int BM = BM_, BN = BN_, BK = BK_, STAGES = STAGES_, WARPS_M = WARPS_M_, WARPS_N = WARPS_N_;
  static constexpr int THREADS = 32 * WARPS_M * WARPS_N;
  static constexpr int A_LD = BK + 8, B_LD = BN + 8;  // +16 bytes per row: ldmatrix rows in distinct banks
  static constexpr int A_STAGE = BM * A_LD, B_STAGE = BK * B_LD;  // elements
  static constexpr int SMEM_BYTES = STAGES * (A_STAGE + B_STAGE) * 2;
  static_assert(BM == 64 * WARPS_M && BN == 64 * WARPS_N, "each warp owns a 64x64 patch");
};

// Consecutive blocks walk down a group of 8 tile rows before moving right, so that the A rows and
// B columns they share are still in L2.
constexpr int kGroupRows = 8;

// Slice k0 .. k0 + BK of the block's rows of A and columns of B.
template <typename C, bool kAligned, typename T>
__device__ __forceinline__ void load_slice(T* as, T* bs, const T* a, const T* b, int m, int n, int k, int row0,
                                           int col0, int k0) {
  kl::load_tile<C::BM, C::BK, C::A_LD, C::THREADS, kAligned>(as, a + size_t(row0) * k + k0, k, m - row0, k - k0);
  kl::load_tile<C::BK, C::BN, C::B_LD, C::THREADS, kAligned>(bs, b + size_t(k0) * n + col0, n, k - k0, n - col0);
}

template <typename C, typename T, bool kAligned>
__global__ void __launch_bounds__(C::THREADS)
    matmul_tensorcore_kernel(const T* __restrict__ a, const T* __restrict__ b, T* __restrict__ c, int m, int n,
                             int k) {
  extern __shared__ __align__(16) unsigned char smem[];
  T* as = reinterpret_cast<T*>(smem);
  T* bs = as + C::STAGES * C::A_STAGE;

  // Grouped block order (see kGroupRows).
  const int tiles_m = (m + C::BM - 1) / C::BM, tiles_n = (n + C::BN - 1) / C::BN;
  const int block = blockIdx.x, per_group = kGroupRows * tiles_n;
  const int first_row = (block / per_group) * kGroupRows;
  const int rows_here = min(tiles_m - first_row, kGroupRows);
  const int row0 = (first_row + (block % per_group) % rows_here) * C::BM;
  const int col0 = ((block % per_group) / rows_here) * C::BN;

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int wm = (warp / C::WARPS_N) * 64, wn = (warp % C::WARPS_N) * 64;  // this warp's 64x64 patch
  const int slices = (k + C::BK - 1) / C::BK;

  float acc[4][8][4] = {};

#pragma unroll
  for (int s = 0; s < C::STAGES - 1; ++s) {
    if (s < slices) {
      load_slice<C, kAligned>(as + s * C::A_STAGE, bs + s * C::B_STAGE, a, b, m, n, k, row0, col0, s * C::BK);
    }
    kl::cp_async_commit();  // an empty group keeps the count uniform
  }
  for (int t = 0; t < slices; ++t) {
    kl::cp_async_wait<C::STAGES - 2>();  // slice t has landed (for this thread)...
    __syncthreads();                     // ...for all threads, and everyone is done with slice t - 1's stage
    const int next = t + C::STAGES - 1;
    if (next < slices) {
      const int s = next % C::STAGES;
      load_slice<C, kAligned>(as + s * C::A_STAGE, bs + s * C::B_STAGE, a, b, m, n, k, row0, col0, next * C::BK);
    }
    kl::cp_async_commit();

    const T* at = as + (t % C::STAGES) * C::A_STAGE;
    const T* bt = bs + (t % C::STAGES) * C::B_STAGE;
#pragma unroll
    for (int kk = 0; kk < C::BK; kk += 16) {
      uint32_t af[4][4], bf[8][2];
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        kl::ldmatrix_x4(af[i], at + (wm + i * 16 + lane % 16) * C::A_LD + kk + (lane / 16) * 8);
      }
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        uint32_t r[4];
        kl::ldmatrix_x4_trans(r, bt + (kk + lane % 16) * C::B_LD + wn + j * 16 + (lane / 16) * 8);
        bf[2 * j][0] = r[0];
        bf[2 * j][1] = r[1];
        bf[2 * j + 1][0] = r[2];
        bf[2 * j + 1][1] = r[3];
      }
#pragma unroll
      for (int i = 0; i < 4; ++i) {
#pragma unroll
        for (int j = 0; j < 8; ++j) kl::mma_16816<T>(acc[i][j], af[i], bf[j][0], bf[j][1]);
      }
    }
  }
  kl::cp_async_wait<0>();

  const int g = lane / 4, t2 = (lane % 4) * 2;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int r = row0 + wm + i * 16 + g + h * 8;
      if (r >= m) continue;
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        const int col = col0 + wn + j * 8 + t2;
        const float lo = acc[i][j][2 * h], hi = acc[i][j][2 * h + 1];
        if constexpr (kAligned) {  // n % 8 == 0: both columns exist, and the pair is 4-byte aligned
          if (col < n) *reinterpret_cast<uint32_t*>(c + size_t(r) * n + col) = kl::pack2<T>(lo, hi);
        } else {
          if (col < n) c[size_t(r) * n + col] = kl::from_float<T>(lo);
          if (col + 1 < n) c[size_t(r) * n + col + 1] = kl::from_float<T>(hi);
        }
      }
    }
  }
}

template <typename C, typename T, bool kAligned>
cudaError_t launch_kernel(const T* a, const T* b, T* c, int m, int n, int k, cudaStream_t stream) {
  // More than the default 48 KiB of dynamic shared memory; set at every launch since it is per device.
  const cudaError_t raised = cudaFuncSetAttribute(matmul_tensorcore_kernel<C, T, kAligned>,
                                                  cudaFuncAttributeMaxDynamicSharedMemorySize, C::SMEM_BYTES);
  if (raised != cudaSuccess) return raised;
  const int blocks = ((m + C::BM - 1) / C::BM) * ((n + C::BN - 1) / C::BN);
  matmul_tensorcore_kernel<C, T, kAligned><<<blocks, C::THREADS, C::SMEM_BYTES, stream>>>(a, b, c, m, n, k);
  return cudaGetLastError();
}

template <typename C, typename T>
cudaError_t launch_config(const T* a, const T* b, T* c, int m, int n, int k, cudaStream_t stream) {
  if (m == 0 || n == 0) return cudaSuccess;
  const bool aligned = k % 8 == 0 && n % 8 == 0 && kl::aligned16(a) && kl::aligned16(b) && kl::aligned16(c);
  return aligned ? launch_kernel<C, T, true>(a, b, c, m, n, k, stream)
                 : launch_kernel<C, T, false>(a, b, c, m, n, k, stream);
}

// fp16 4096^3 on the H100 (2026-11-22, two runs), TFLOP/s: 128x128x32 4 stages 305/309, 128x128x64
// 3 stages 312/313, 128x256x32 4 stages 271/256, 128x256x64 3 stages 327/303, 256x128x64 3 stages
// 333/311; cuBLAS 759. The choice is within noise of 128x128x32, which is ahead at 2048^3 and 8192^3.
using Chosen = Tiles<256, 128, 64, 3, 4, 2>;

template <typename T>
cudaError_t launch(const T* a, const T* b, T* c, int m, int n, int k, cudaStream_t stream) {
  return launch_config<Chosen>(a, b, c, m, n, k, stream);
}

}  // namespace

cudaError_t launch_matmul_tensorcore(const __half* a, const __half* b, __half* c, int m, int n, int k,
                                     cudaStream_t stream) {
  return launch(a, b, c, m, n, k, stream);
}
cudaError_t launch_matmul_tensorcore(const __nv_bfloat16* a, const __nv_bfloat16* b, __nv_bfloat16* c, int m, int n,
                                     int k, cudaStream_t stream) {
  return launch(a, b, c, m, n, k, stream);
}
