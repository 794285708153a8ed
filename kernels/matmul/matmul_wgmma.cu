// Hopper's own matmul path (sm_90a): TMA copies 64-deep slices of A and B into 128-byte-swizzled shared
// memory, a ring of STAGES slices guarded by mbarriers (full: the copy landed; empty: both consumers are
// done with it), and wgmma.mma_async multiplies straight out of shared memory. Warp specialization: one
// producer warpgroup issues the copies from a single thread and gives its registers away (setmaxnreg);
// two consumer warpgroups each own 64 rows of the 128x256 tile, 128 fp32 accumulators per thread.
// A (m x k, row-major) is K-major for wgmma; B (k x n, row-major) is N-major, read with imm-trans-b = 1,
// so neither operand is transposed in memory. TMA zero-fills what lies past m, n or k, and the epilogue
// stores only inside C, so any m, n, k whose rows are 16-byte multiples (k and n multiples of 8) runs
// here; other shapes go to the mma.sync kernel (matmul_tensorcore.cu).
// The instructions exist only in sm_90a code; every other arch compiles an empty kernel, which the
// op's `requires` (op.toml) keeps from being called.
#include "hopper.cuh"
#include "matmul.h"
#include "mma.cuh"  // kl::pack2

#if KL_HOPPER

namespace {

using namespace kl::hopper;

constexpr int BM = 128, BN = 256, BK = 64, STAGES = 4;
constexpr int CONSUMERS = 2;                       // warpgroups of 128 threads, 64 rows of the tile each
constexpr int THREADS = 128 * (1 + CONSUMERS);    // warpgroup 0 produces
constexpr int A_STAGE = BM * BK * 2;               // bytes per stage: 16 KiB of A, 32 KiB of B
constexpr int B_STAGE = BK * BN * 2;
constexpr int SMEM_BYTES = STAGES * (A_STAGE + B_STAGE) + 1024;  // + room to align the ring to 1024 bytes

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)

constexpr int ROW_BYTES = 128;  // a 64-element row of 16-bit values: one swizzle row
constexpr int B_BOXES = BN / 64;  // B arrives as 64-column boxes, BK rows of 128 bytes each
constexpr int kGroupRows = 8;   // block order: down 8 tile rows, then right (L2 reuse)

template <typename T>
struct Wgmma;

// d (64 x 256, fp32, this warpgroup's accumulators) += A (64 x 16, K-major) * B (16 x 256, N-major).
#define KL_WGMMA(TYPE)                                                                                   \
  __device__ __forceinline__ static void mma(float (&d)[128], uint64_t a, uint64_t b) {                 \
    asm volatile("{\n .reg .pred p;\n setp.ne.b32 p, %130, 0;\n"                                      \
                 "wgmma.mma_async.sync.aligned.m64n256k16.f32." TYPE "." TYPE " {" KL_REGS128 "}, %128, %129, p, 1, 1, 0, 1;\n}\n" \
                 : KL_ACC128(d)                                                                         \
                 : "l"(a), "l"(b), "r"(1));                                                             \
  }
template <>
struct Wgmma<__half> {
  KL_WGMMA("f16")
};
template <>
struct Wgmma<__nv_bfloat16> {
  KL_WGMMA("bf16")
};

#endif  // __CUDA_ARCH_FEAT_SM90_ALL

template <typename T>
__global__ void __launch_bounds__(THREADS, 1)
    matmul_wgmma_kernel(const __grid_constant__ CUtensorMap map_a, const __grid_constant__ CUtensorMap map_b,
                        T* __restrict__ c, int m, int n, int k) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  __shared__ uint64_t full[STAGES], empty[STAGES];
  // The 128-byte swizzle repeats every 1024 bytes: each stage starts on such a boundary.
  unsigned char* ring = smem_raw + ((1024 - shared_addr(smem_raw) % 1024) % 1024);
  unsigned char* as = ring;                     // STAGES x [BM rows][128 bytes]
  unsigned char* bs = ring + STAGES * A_STAGE;  // STAGES x [B_BOXES][BK rows][128 bytes]

  const int tiles_m = (m + BM - 1) / BM, tiles_n = (n + BN - 1) / BN;
  const int block = blockIdx.x, per_group = kGroupRows * tiles_n;
  const int first_row = (block / per_group) * kGroupRows;
  const int rows_here = min(tiles_m - first_row, kGroupRows);
  const int row0 = (first_row + (block % per_group) % rows_here) * BM;
  const int col0 = ((block % per_group) / rows_here) * BN;
  const int slices = (k + BK - 1) / BK;
  const int warpgroup = threadIdx.x / 128, t = threadIdx.x % 128;

  if (threadIdx.x == 0) {
    for (int s = 0; s < STAGES; ++s) {
      bar_init(&full[s], 1);                    // the producer's arrive, plus the copies' bytes
      bar_init(&empty[s], CONSUMERS * 128);     // every consumer thread, once done with the slice
    }
    bar_init_fence();
  }
  __syncthreads();

  if (warpgroup == 0) {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 40;\n");
    if (t == 0) {
      // B boxes wholly past n are not loaded: they would only feed columns of C that are never stored.
      // Every box that is loaded counts whole (zero-filled past the edges) against the barrier.
      const int b_boxes = min(B_BOXES, (n - col0 + 63) / 64);
      const uint32_t bytes = A_STAGE + b_boxes * BK * ROW_BYTES;
      for (int i = 0; i < slices; ++i) {
        const int s = i % STAGES;
        if (i >= STAGES) bar_wait(&empty[s], ((i / STAGES) + 1) & 1);  // its previous slice was consumed
        bar_expect(&full[s], bytes);
        tma_load(as + s * A_STAGE, &map_a, &full[s], i * BK, row0);
        for (int j = 0; j < b_boxes; ++j)
          tma_load(bs + s * B_STAGE + j * BK * ROW_BYTES, &map_b, &full[s], col0 + 64 * j, i * BK);
      }
    }
    return;
  }

  // 232 for each consumer thread, 40 for each producer thread: 168 (ptxas' figure for this kernel, which
  // -Xptxas=-v shows) times 384 threads. Should ptxas ever report another count, these must change with it;
  // until then launch() refuses to launch.
  asm volatile("setmaxnreg.inc.sync.aligned.u32 232;\n");
  const int rows = (warpgroup - 1) * 64;  // this consumer's rows of the tile
  float d[128];
#pragma unroll
  for (int i = 0; i < 128; ++i) d[i] = 0.f;
  for (int i = 0; i < slices; ++i) {
    const int s = i % STAGES;
    bar_wait(&full[s], (i / STAGES) & 1);
    const uint32_t a0 = shared_addr(as + s * A_STAGE + rows * ROW_BYTES);
    const uint32_t b0 = shared_addr(bs + s * B_STAGE);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < BK / 16; ++kk) {
      // A, K-major: 16 more columns are 32 bytes along the (swizzled) row; 8-row groups 1024 bytes apart.
      // B, N-major: 16 more rows are 16 * 128 bytes on; 64-column boxes BK * 128 bytes apart (leading),
      // 8-row groups 1024 bytes apart (stride).
      Wgmma<T>::mma(d, descriptor(a0 + kk * 32, 16, 1024), descriptor(b0 + kk * 16 * ROW_BYTES, BK * ROW_BYTES, 1024));
    }
    wgmma_commit();
    wgmma_wait<0>();
    bar_arrive(&empty[s]);
  }

  // Accumulator layout of m64nNk16: warp w holds rows 16w .. 16w + 15; for each 8-column block j, lane l
  // holds row l / 4 (and + 8) at columns 2 (l % 4) and + 1.
  const int warp = t / 32, lane = t % 32;
  const int r0 = row0 + rows + warp * 16 + lane / 4;
#pragma unroll
  for (int j = 0; j < BN / 8; ++j) {
    const int col = col0 + j * 8 + (lane % 4) * 2;  // even, and n is a multiple of 8: col + 1 < n too
    if (col >= n) continue;
    if (r0 < m) *reinterpret_cast<uint32_t*>(c + size_t(r0) * n + col) = kl::pack2<T>(d[4 * j], d[4 * j + 1]);
    if (r0 + 8 < m) *reinterpret_cast<uint32_t*>(c + size_t(r0 + 8) * n + col) = kl::pack2<T>(d[4 * j + 2], d[4 * j + 3]);
  }
#elif defined(__CUDA_ARCH__)
  __trap();  // a library without sm_90a code, run on a 9.0 GPU anyway: fail the launch, never return garbage
#endif
}

// A row-major rows x cols matrix read in boxes of box_rows x 64 columns.
template <typename T>
bool matrix_map(CUtensorMap* map, const T* base, int rows, int cols, int box_rows) {
  const cuuint64_t dims[2] = {cuuint64_t(cols), cuuint64_t(rows)};
  return tensor_map(map, base, 2, dims, box_rows);
}

template <typename T>
cudaError_t launch(const T* a, const T* b, T* c, int m, int n, int k, cudaStream_t stream) {
  if (m == 0 || n == 0) return cudaSuccess;
  // TMA needs 16-byte aligned bases and row strides; k == 0 has nothing to load.
  const bool tma = k > 0 && k % 8 == 0 && n % 8 == 0 && kl::aligned16(a) && kl::aligned16(b) && kl::aligned16(c);
  if (!tma) return launch_matmul_tensorcore(a, b, c, m, n, k, stream);
  // A driver without the tensor-map encoder, or one that refuses these maps: the mma.sync kernel instead.
  CUtensorMap map_a, map_b;
  if (!matrix_map(&map_a, a, m, k, BM) || !matrix_map(&map_b, b, k, n, BK))
    return launch_matmul_tensorcore(a, b, c, m, n, k, stream);
  static const bool planned = registers_are(matmul_wgmma_kernel<T>, registers_per_thread(THREADS));
  if (!planned) return cudaErrorInvalidDeviceFunction;
  const cudaError_t raised =
      cudaFuncSetAttribute(matmul_wgmma_kernel<T>, cudaFuncAttributeMaxDynamicSharedMemorySize, SMEM_BYTES);
  if (raised != cudaSuccess) return raised;
  const int blocks = ((m + BM - 1) / BM) * ((n + BN - 1) / BN);
  matmul_wgmma_kernel<T><<<blocks, THREADS, SMEM_BYTES, stream>>>(map_a, map_b, c, m, n, k);
  return cudaGetLastError();
}

}  // namespace

cudaError_t launch_matmul_wgmma(const __half* a, const __half* b, __half* c, int m, int n, int k, cudaStream_t stream) {
  return launch(a, b, c, m, n, k, stream);
}
cudaError_t launch_matmul_wgmma(const __nv_bfloat16* a, const __nv_bfloat16* b, __nv_bfloat16* c, int m, int n, int k,
                                cudaStream_t stream) {
  return launch(a, b, c, m, n, k, stream);
}

#else  // CUDA 11: no TMA or wgmma; op.toml's `requires` keeps these from being called

cudaError_t launch_matmul_wgmma(const __half*, const __half*, __half*, int, int, int, cudaStream_t) {
  return cudaErrorNotSupported;
}
cudaError_t launch_matmul_wgmma(const __nv_bfloat16*, const __nv_bfloat16*, __nv_bfloat16*, int, int, int,
                                cudaStream_t) {
  return cudaErrorNotSupported;
}

#endif  // KL_HOPPER
