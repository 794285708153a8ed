// Fused attention in the flash-attention style: a block of 4 warps owns 64 queries of one
// (batch, head) and walks over 64-key blocks, double-buffered in shared memory by cp.async.
// Each warp computes its 16x64 scores with mma.sync, updates a running row max and sum (online
// softmax, in base 2), and multiplies the probabilities, still in registers, by V. The scores
// never reach device memory, and key blocks past a sequence's valid length are never loaded.
#include "attention.h"
#include "mma.cuh"

namespace {

constexpr int kBQ = 64, kBKV = 64, kThreads = 128;

template <int D>
constexpr int smem_bytes() {
  return (kBQ + 4 * kBKV) * (D + 8) * 2;  // Q, two K and two V tiles; rows padded by 16 bytes
}

template <typename T, int D>
__global__ void __launch_bounds__(kThreads)
    attention_kernel(const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v,
                     const int* __restrict__ lengths, T* __restrict__ o, int heads, int seq, float scale_log2) {
  constexpr int kLd = D + 8;
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

  uint32_t qf[D / 16][4];                // this warp's 16 queries, as A fragments
  float acc[D / 8][4] = {};              // output rows g and g + 8, unnormalized
  float row_max[2] = {-INFINITY, -INFINITY};
  float row_sum[2] = {0.f, 0.f};         // this thread's share; the quad's four are added at the end

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
    if (kb == 0) {
#pragma unroll
      for (int c = 0; c < D / 16; ++c) {
        kl::ldmatrix_x4(qf[c], qs + (warp * 16 + lane % 16) * kLd + c * 16 + (lane / 16) * 8);
      }
    }
    const T* kt = ks + stage * kBKV * kLd;
    const T* vt = vs + stage * kBKV * kLd;

    // Scores: 16 queries x 64 keys per warp, as 8 accumulator tiles of 16x8.
    float s[kBKV / 8][4] = {};
#pragma unroll
    for (int c = 0; c < D / 16; ++c) {
#pragma unroll
      for (int j = 0; j < kBKV / 16; ++j) {
        uint32_t r[4];  // keys j*16 .. +15 as B fragments: K's rows are B's columns
        kl::ldmatrix_x4(r, kt + (j * 16 + (lane / 16) * 8 + lane % 8) * kLd + c * 16 + ((lane / 8) % 2) * 8);
        kl::mma_16816<T>(s[2 * j], qf[c], r[0], r[1]);
        kl::mma_16816<T>(s[2 * j + 1], qf[c], r[2], r[3]);
      }
    }

    // Online softmax. Entry e of tile n is key n*8 + 2*(lane%4) + e%2, row g (e < 2) or g + 8.
    const int key0 = kb * kBKV + (lane % 4) * 2;
    const bool partial = (kb + 1) * kBKV > length;
    float block_max[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int n = 0; n < kBKV / 8; ++n) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        float x = s[n][e] * scale_log2;
        if (partial && key0 + n * 8 + e % 2 >= length) x = -INFINITY;
        s[n][e] = x;
        block_max[e / 2] = fmaxf(block_max[e / 2], x);
      }
    }
    float correction[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      // The four lanes of a quad hold one row between them.
      block_max[h] = fmaxf(block_max[h], kl::shfl_xor(block_max[h], 1));
      block_max[h] = fmaxf(block_max[h], kl::shfl_xor(block_max[h], 2));
      const float new_max = fmaxf(row_max[h], block_max[h]);  // finite: each block has a valid key
      correction[h] = kl::fast_exp2(row_max[h] - new_max);
      row_max[h] = new_max;
      row_sum[h] *= correction[h];
    }
#pragma unroll
    for (int n = 0; n < kBKV / 8; ++n) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        s[n][e] = kl::fast_exp2(s[n][e] - row_max[e / 2]);
        row_sum[e / 2] += s[n][e];
      }
    }
#pragma unroll
    for (int n = 0; n < D / 8; ++n) {
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[n][e] *= correction[e / 2];
    }

    // acc += P V: the score accumulators are laid out as A fragments already (16 keys = 2 tiles).
#pragma unroll
    for (int c = 0; c < kBKV / 16; ++c) {
      const uint32_t p[4] = {kl::pack2<T>(s[2 * c][0], s[2 * c][1]), kl::pack2<T>(s[2 * c][2], s[2 * c][3]),
                             kl::pack2<T>(s[2 * c + 1][0], s[2 * c + 1][1]),
                             kl::pack2<T>(s[2 * c + 1][2], s[2 * c + 1][3])};
#pragma unroll
      for (int n = 0; n < D / 16; ++n) {
        uint32_t r[4];  // V rows are keys (k), its columns the output's: transposed load
        kl::ldmatrix_x4_trans(r, vt + (c * 16 + lane % 16) * kLd + n * 16 + (lane / 16) * 8);
        kl::mma_16816<T>(acc[2 * n], p, r[0], r[1]);
        kl::mma_16816<T>(acc[2 * n + 1], p, r[2], r[3]);
      }
    }
    __syncthreads();  // all warps are done with this stage before the next prefetch overwrites it
  }
  kl::cp_async_wait<0>();

  float inv[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    float total = row_sum[h] + kl::shfl_xor(row_sum[h], 1);
    total += kl::shfl_xor(total, 2);
    inv[h] = 1.f / total;  // no valid key: 0 / 0 = NaN, as in the reference
  }
  const int g = lane / 4, t2 = (lane % 4) * 2;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int row = q0 + warp * 16 + g + h * 8;
    if (row >= seq) continue;
    T* out = o + base + size_t(row) * D;
#pragma unroll
    for (int n = 0; n < D / 8; ++n) {
      *reinterpret_cast<uint32_t*>(out + n * 8 + t2) =
          kl::pack2<T>(acc[n][2 * h] * inv[h], acc[n][2 * h + 1] * inv[h]);
    }
  }
}

template <typename T, int D>
cudaError_t launch_d(const T* q, const T* k, const T* v, const int* lengths, T* o, int batch, int heads, int seq,
                     cudaStream_t stream) {
  constexpr int kSmem = smem_bytes<D>();
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
