// Fused attention in the flash-attention style: a block of 4 warps owns 64 queries of one (batch, head)
// (128 at d = 128) and walks over key blocks (64 keys; 32 at d = 128), double-buffered in shared memory
// by cp.async. Each warp computes its scores with mma.sync, updates a running row max and sum (online
// softmax, in base 2), and multiplies the probabilities, still in registers, by V. The scores never
// reach device memory, and key blocks past a sequence's valid length are never loaded.
#include "attention.h"
#include "mma.cuh"

namespace {

constexpr int kThreads = 128;

// Query tiles of 16 rows per warp. At d = 128 each warp takes two (rows w*16 and 64 + w*16), so
// every K and V fragment read from shared memory feeds two mma instead of one: with one tile that
// read rate, not the tensor cores, bounds the kernel. Q then stays in shared memory (its registers
// go to the second tile's scores and output).
template <int D>
__host__ __device__ constexpr int mtiles() { return D == 128 ? 2 : 1; }
template <int D>
__host__ __device__ constexpr int block_q() { return 64 * mtiles<D>(); }
// Keys per block: 32 at d = 128, so that two tiles' scores fit in registers beside their outputs.
template <int D>
__host__ __device__ constexpr int block_kv() { return D == 128 ? 32 : 64; }

template <int D>
constexpr int smem_bytes() {
  return (block_q<D>() + 4 * block_kv<D>()) * (D + 8) * 2;  // Q, two K and two V tiles; rows padded by 16 bytes
}

template <typename T, int D>
__global__ void __launch_bounds__(kThreads)
    attention_kernel(const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v,
                     const int* __restrict__ lengths, T* __restrict__ o, int heads, int seq, float scale_log2) {
  constexpr int kLd = D + 8, MT = mtiles<D>(), kBQ = block_q<D>(), kBKV = block_kv<D>();
  constexpr bool kQInRegs = MT == 1;
  extern __shared__ __align__(16) unsigned char smem[];
  T* qs = reinterpret_cast<T*>(smem);
  T* ks = qs + kBQ * kLd;       // 2 stages
  T* vs = ks + 2 * kBKV * kLd;  // 2 stages

  const int bh = blockIdx.y, q0 = blockIdx.x * kBQ;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const size_t base = size_t(bh) * seq * D;
  const int length = min(lengths[bh / heads], seq);
  const int blocks = length > 0 ? (length + kBKV - 1) / kBKV : 0;

  // Rows past the sequence (queries) or past its valid length (keys, values) read as zero.
  kl::load_tile<kBQ, D, kLd, kThreads>(qs, q + base + size_t(q0) * D, D, seq - q0, D);
  if (blocks > 0) {
    kl::load_tile<kBKV, D, kLd, kThreads>(ks, k + base, D, length, D);
    kl::load_tile<kBKV, D, kLd, kThreads>(vs, v + base, D, length, D);
  }
  kl::cp_async_commit();

  uint32_t qf[kQInRegs ? D / 16 : 1][4];  // one tile's 16 queries as A fragments, when kept in registers
  float acc[MT][D / 8][4] = {};           // output rows g and g + 8 of each tile, unnormalized
  float row_max[MT][2], row_sum[MT][2];   // row_sum: this thread's share; the quad's four are added at the end
#pragma unroll
  for (int m = 0; m < MT; ++m) {
    row_max[m][0] = row_max[m][1] = -INFINITY;
    row_sum[m][0] = row_sum[m][1] = 0.f;
  }
  // Tile m's rows in the block: m * 64 + warp * 16 + 0..15.
  const T* qrow = qs + (warp * 16 + lane % 16) * kLd + (lane / 16) * 8;

  for (int kb = 0; kb < blocks; ++kb) {
    const int stage = kb % 2;
    if (kb + 1 < blocks) {  // prefetch the next key block into the other stage
      const int j0 = (kb + 1) * kBKV;
      const size_t at = base + size_t(j0) * D;
      kl::load_tile<kBKV, D, kLd, kThreads>(ks + (1 - stage) * kBKV * kLd, k + at, D, length - j0, D);
      kl::load_tile<kBKV, D, kLd, kThreads>(vs + (1 - stage) * kBKV * kLd, v + at, D, length - j0, D);
    }
    kl::cp_async_commit();
    kl::cp_async_wait<1>();  // everything but the prefetch has landed
    __syncthreads();
    if constexpr (kQInRegs) {
      if (kb == 0) {
#pragma unroll
        for (int c = 0; c < D / 16; ++c) kl::ldmatrix_x4(qf[c], qrow + c * 16);
      }
    }
    const T* kt = ks + stage * kBKV * kLd;
    const T* vt = vs + stage * kBKV * kLd;

    // Scores: per tile 16 queries x kBKV keys, as kBKV / 8 accumulator tiles of 16x8.
    float s[MT][kBKV / 8][4] = {};
#pragma unroll
    for (int c = 0; c < D / 16; ++c) {
      uint32_t qm[MT][4];
      if constexpr (!kQInRegs) {
#pragma unroll
        for (int m = 0; m < MT; ++m) kl::ldmatrix_x4(qm[m], qrow + m * 64 * kLd + c * 16);
      }
#pragma unroll
      for (int j = 0; j < kBKV / 16; ++j) {
        uint32_t r[4];  // keys j*16 .. +15 as B fragments: K's rows are B's columns
        kl::ldmatrix_x4(r, kt + (j * 16 + (lane / 16) * 8 + lane % 8) * kLd + c * 16 + ((lane / 8) % 2) * 8);
#pragma unroll
        for (int m = 0; m < MT; ++m) {
          if constexpr (kQInRegs) {  // the one tile's queries, loaded once
            kl::mma_16816<T>(s[m][2 * j], qf[c], r[0], r[1]);
            kl::mma_16816<T>(s[m][2 * j + 1], qf[c], r[2], r[3]);
          } else {  // tile m's queries, just read from shared memory
            kl::mma_16816<T>(s[m][2 * j], qm[m], r[0], r[1]);
            kl::mma_16816<T>(s[m][2 * j + 1], qm[m], r[2], r[3]);
          }
        }
      }
    }

    // Online softmax. Entry e of tile n is key n*8 + 2*(lane%4) + e%2, row g (e < 2) or g + 8.
    const int key0 = kb * kBKV + (lane % 4) * 2;
    const bool partial = (kb + 1) * kBKV > length;
#pragma unroll
    for (int m = 0; m < MT; ++m) {
      float block_max[2] = {-INFINITY, -INFINITY};
#pragma unroll
      for (int n = 0; n < kBKV / 8; ++n) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          float x = s[m][n][e] * scale_log2;
          if (partial && key0 + n * 8 + e % 2 >= length) x = -INFINITY;
          s[m][n][e] = x;
          block_max[e / 2] = fmaxf(block_max[e / 2], x);
        }
      }
      float correction[2];
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        // The four lanes of a quad hold one row between them.
        block_max[h] = fmaxf(block_max[h], kl::shfl_xor(block_max[h], 1));
        block_max[h] = fmaxf(block_max[h], kl::shfl_xor(block_max[h], 2));
        const float new_max = fmaxf(row_max[m][h], block_max[h]);  // finite: each block has a valid key
        correction[h] = kl::fast_exp2(row_max[m][h] - new_max);
        row_max[m][h] = new_max;
        row_sum[m][h] *= correction[h];
      }
#pragma unroll
      for (int n = 0; n < kBKV / 8; ++n) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          s[m][n][e] = kl::fast_exp2(s[m][n][e] - row_max[m][e / 2]);
          row_sum[m][e / 2] += s[m][n][e];
        }
      }
#pragma unroll
      for (int n = 0; n < D / 8; ++n) {
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[m][n][e] *= correction[e / 2];
      }
    }

    // acc += P V: the score accumulators are laid out as A fragments already (16 keys = 2 tiles).
#pragma unroll
    for (int c = 0; c < kBKV / 16; ++c) {
      uint32_t p[MT][4];
#pragma unroll
      for (int m = 0; m < MT; ++m) {
        p[m][0] = kl::pack2<T>(s[m][2 * c][0], s[m][2 * c][1]);
        p[m][1] = kl::pack2<T>(s[m][2 * c][2], s[m][2 * c][3]);
        p[m][2] = kl::pack2<T>(s[m][2 * c + 1][0], s[m][2 * c + 1][1]);
        p[m][3] = kl::pack2<T>(s[m][2 * c + 1][2], s[m][2 * c + 1][3]);
      }
#pragma unroll
      for (int n = 0; n < D / 16; ++n) {
        uint32_t r[4];  // V rows are keys (k), its columns the output's: transposed load
        kl::ldmatrix_x4_trans(r, vt + (c * 16 + lane % 16) * kLd + n * 16 + (lane / 16) * 8);
#pragma unroll
        for (int m = 0; m < MT; ++m) {
          kl::mma_16816<T>(acc[m][2 * n], p[m], r[0], r[1]);
          kl::mma_16816<T>(acc[m][2 * n + 1], p[m], r[2], r[3]);
        }
      }
    }
    __syncthreads();  // all warps are done with this stage before the next prefetch overwrites it
  }
  kl::cp_async_wait<0>();

  const int g = lane / 4, t2 = (lane % 4) * 2;
#pragma unroll
  for (int m = 0; m < MT; ++m) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      // Every lane shuffles before any leaves for a row past the sequence: the quad's four must all take part.
      float total = row_sum[m][h] + kl::shfl_xor(row_sum[m][h], 1);
      total += kl::shfl_xor(total, 2);
      const float inv = 1.f / total;  // no valid key: 0 * (1 / 0) = NaN, as in the reference
      const int row = q0 + m * 64 + warp * 16 + g + h * 8;
      if (row >= seq) continue;
      T* out = o + base + size_t(row) * D;
#pragma unroll
      for (int n = 0; n < D / 8; ++n) {
        *reinterpret_cast<uint32_t*>(out + n * 8 + t2) =
            kl::pack2<T>(acc[m][n][2 * h] * inv, acc[m][n][2 * h + 1] * inv);
      }
    }
  }
}

template <typename T, int D>
cudaError_t launch_d(const T* q, const T* k, const T* v, const int* lengths, T* o, int batch, int heads, int seq,
                     cudaStream_t stream) {
  constexpr int kSmem = smem_bytes<D>(), kBQ = block_q<D>();
  // Over the default 48 KiB for d = 128; set at every launch since it is per device.
  const cudaError_t raised =
      cudaFuncSetAttribute(attention_kernel<T, D>, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem);
  if (raised != cudaSuccess) return raised;
  const dim3 grid((seq + kBQ - 1) / kBQ, batch * heads);
  const float scale_log2 = kl::kLog2e / sqrtf(static_cast<float>(D));
  attention_kernel<T, D><<<grid, kThreads, kSmem, stream>>>(q, k, v, lengths, o, heads, seq, scale_log2);
  return cudaGetLastError();
}

template <typename T>
cudaError_t launch(const T* q, const T* k, const T* v, const int* lengths, T* o, int batch, int heads, int seq, int d,
                   cudaStream_t stream) {
  if (batch == 0 || heads == 0 || seq == 0) return cudaSuccess;
  if (d == 64) return launch_d<T, 64>(q, k, v, lengths, o, batch, heads, seq, stream);
  if (d == 128) return launch_d<T, 128>(q, k, v, lengths, o, batch, heads, seq, stream);
  return cudaErrorInvalidValue;  // the binding admits 64 and 128 only
}

}  // namespace

cudaError_t launch_attention(const __half* q, const __half* k, const __half* v, const int* lengths, __half* o,
                             int batch, int heads, int seq, int d, cudaStream_t stream) {
  return launch(q, k, v, lengths, o, batch, heads, seq, d, stream);
}
cudaError_t launch_attention(const __nv_bfloat16* q, const __nv_bfloat16* k, const __nv_bfloat16* v,
                             const int* lengths, __nv_bfloat16* o, int batch, int heads, int seq, int d,
                             cudaStream_t stream) {
  return launch(q, k, v, lengths, o, batch, heads, seq, d, stream);
}
