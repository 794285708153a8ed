// Attention on Hopper's own path (sm_90a), the structure of flash attention 3: a block owns 128 queries
// of one (batch, head). One producer warpgroup copies Q once and then K and V blocks of 128 keys by TMA
// into 128-byte-swizzled shared memory, a ring of STAGES blocks guarded by mbarriers (K and V each have
// a "full" barrier, so the scores can start before V lands; "empty": both consumers are done with the
// stage). Two consumer warpgroups own 64 queries each: S = Q K^T with wgmma straight out of shared memory
// (both operands K-major), the online softmax on S in registers (base 2), then O += P V with P, rounded to
// 16 bits, as wgmma's register operand and V read N-major (imm-trans-b = 1), so nothing is transposed in
// memory. Keys past a sequence's valid length are masked to -inf in its last block and blocks wholly past
// it are never loaded; the 3-D tensor maps (d, seq, batch * heads) read rows past the sequence as zero.
// The instructions exist only in sm_90a code; every other arch compiles an empty kernel, which the op's
// `requires` (op.toml) keeps from being called.
#include "attention.h"
#include "hopper.cuh"
#include "mma.cuh"  // kl::pack2

#if KL_HOPPER

namespace {

using namespace kl::hopper;

constexpr int kBQ = 128, kBKV = 128, STAGES = 2;
constexpr int CONSUMERS = 2;                     // warpgroups of 128 threads, 64 queries each
constexpr int THREADS = 128 * (1 + CONSUMERS);  // warpgroup 0 produces

template <int D>
struct Layout {
  static constexpr int Q_BYTES = kBQ * D * 2;      // [D / 64 boxes][kBQ rows][128 bytes]
  static constexpr int KV_BYTES = kBKV * D * 2;    // K or V of one stage: [D / 64 boxes][kBKV rows][128 bytes]
  static constexpr int SMEM = Q_BYTES + 2 * STAGES * KV_BYTES + 1024;  // + room to align to 1024 bytes
};

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)

constexpr int ROW_BYTES = 128;  // 64 16-bit values: one swizzle row, one TMA box's width

template <typename T, int N>
struct Wgmma;

// S (64 x 128 scores, fp32) = Q (64 x 16, K-major) * K^T (16 x 128, K-major: K's rows are its columns),
// accumulated over d when `accumulate`; and O (64 x N, fp32) += P (64 x 16, registers, A-fragment layout)
// * V (16 x N, N-major).
#define KL_WGMMA_ATT(TYPE, N, REGS, ACC, A, B, SCALE, P0, P1, P2, P3, VB, VS)                                          \
  __device__ __forceinline__ static void ss(float(&d)[N / 2], uint64_t a, uint64_t b, int accumulate) {           \
    asm volatile("{\n .reg .pred p;\n setp.ne.b32 p, " SCALE ", 0;\n"                                             \
                 "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32." TYPE "." TYPE " {" REGS "}, " A ", " B          \
                 ", p, 1, 1, 0, 0;\n}\n"                                                                           \
                 : ACC(d)                                                                                          \
                 : "l"(a), "l"(b), "r"(accumulate));                                                              \
  }                                                                                                                \
  __device__ __forceinline__ static void rs(float(&d)[N / 2], const uint32_t(&a)[4], uint64_t b) {                 \
    asm volatile("{\n .reg .pred p;\n setp.ne.b32 p, " VS ", 0;\n"                                                \
                 "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32." TYPE "." TYPE " {" REGS "}, {" P0 ", " P1 ", "   \
                 P2 ", " P3 "}, " VB ", p, 1, 1, 1;\n}\n"                                                          \
                 : ACC(d)                                                                                          \
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(1));                                   \
  }
#define KL_WGMMA_N128(TYPE) KL_WGMMA_ATT(TYPE, 128, KL_REGS64, KL_ACC64, "%64", "%65", "%66", "%64", "%65", "%66", "%67", "%68", "%69")
#define KL_WGMMA_N64(TYPE) KL_WGMMA_ATT(TYPE, 64, KL_REGS32, KL_ACC32, "%32", "%33", "%34", "%32", "%33", "%34", "%35", "%36", "%37")

template <>
struct Wgmma<__half, 128> {
  KL_WGMMA_N128("f16")
};
template <>
struct Wgmma<__nv_bfloat16, 128> {
  KL_WGMMA_N128("bf16")
};
template <>
struct Wgmma<__half, 64> {
  KL_WGMMA_N64("f16")
};
template <>
struct Wgmma<__nv_bfloat16, 64> {
  KL_WGMMA_N64("bf16")
};

// Keeps the compiler from moving reads or writes of accumulators across wgmma's issue and wait: the
// asynchronous multiply owns them in between, which the compiler cannot see.
template <int N>
__device__ __forceinline__ void fence_operands(float (&d)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

#endif  // __CUDA_ARCH_FEAT_SM90_ALL

template <typename T, int D>
__global__ void __launch_bounds__(THREADS, 1)
    attention_wgmma_kernel(const __grid_constant__ CUtensorMap map_q, const __grid_constant__ CUtensorMap map_k,
                           const __grid_constant__ CUtensorMap map_v, const int* __restrict__ lengths,
                           T* __restrict__ o, int heads, int seq, float scale_log2) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using L = Layout<D>;
  constexpr int BOXES = D / 64;
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  __shared__ uint64_t q_full, k_full[STAGES], v_full[STAGES], empty[STAGES];
  // The 128-byte swizzle repeats every 1024 bytes: each tile starts on such a boundary.
  unsigned char* qs = smem_raw + ((1024 - shared_addr(smem_raw) % 1024) % 1024);
  unsigned char* ks = qs + L::Q_BYTES;              // STAGES x K
  unsigned char* vs = ks + STAGES * L::KV_BYTES;    // STAGES x V

  const int bh = blockIdx.y, q0 = blockIdx.x * kBQ;
  const int length = min(lengths[bh / heads], seq);
  const int blocks = length > 0 ? (length + kBKV - 1) / kBKV : 0;
  const int warpgroup = threadIdx.x / 128, t = threadIdx.x % 128;

  if (threadIdx.x == 0) {
    bar_init(&q_full, 1);
    for (int s = 0; s < STAGES; ++s) {
      bar_init(&k_full[s], 1);                 // the producer's arrive, plus the copies' bytes
      bar_init(&v_full[s], 1);
      bar_init(&empty[s], CONSUMERS * 128);    // every consumer thread, once done with the stage
    }
    bar_init_fence();
  }
  __syncthreads();

  if (warpgroup == 0) {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 24;\n");
    if (t == 0) {
      bar_expect(&q_full, L::Q_BYTES);
      for (int c = 0; c < BOXES; ++c) tma_load(qs + c * kBQ * ROW_BYTES, &map_q, &q_full, c * 64, q0, bh);
      for (int kb = 0; kb < blocks; ++kb) {
        const int s = kb % STAGES;
        if (kb >= STAGES) bar_wait(&empty[s], ((kb / STAGES) + 1) & 1);  // its previous block was consumed
        bar_expect(&k_full[s], L::KV_BYTES);
        for (int c = 0; c < BOXES; ++c)
          tma_load(ks + s * L::KV_BYTES + c * kBKV * ROW_BYTES, &map_k, &k_full[s], c * 64, kb * kBKV, bh);
        bar_expect(&v_full[s], L::KV_BYTES);
        for (int c = 0; c < BOXES; ++c)
          tma_load(vs + s * L::KV_BYTES + c * kBKV * ROW_BYTES, &map_v, &v_full[s], c * 64, kb * kBKV, bh);
      }
    }
    return;
  }

  // 240 registers for each consumer thread, 24 for each producer thread: 168 (the kernel's count under
  // __launch_bounds__(384, 1)) times 384 threads. With fewer from ptxas, the increase could never be
  // granted and the consumers would wait forever: launch_d refuses to launch unless the count is 168.
  asm volatile("setmaxnreg.inc.sync.aligned.u32 240;\n");
  const int rows = (warpgroup - 1) * 64;  // this consumer's queries in the block
  const int warp = t / 32, lane = t % 32;

  // Accumulator layout of m64nNk16: warp w holds rows 16w .. 16w + 15; for each 8-column block j, lane l
  // holds row l / 4 at columns 8j + 2 (l % 4) and + 1 (entries 4j, 4j + 1) and row l / 4 + 8 (4j + 2, 4j + 3).
  float acc[D / 2];
#pragma unroll
  for (int i = 0; i < D / 2; ++i) acc[i] = 0.f;
  float row_max[2] = {-INFINITY, -INFINITY}, row_sum[2] = {0.f, 0.f};  // row_sum: this thread's share

  bar_wait(&q_full, 0);
  const uint32_t q_addr = shared_addr(qs + rows * ROW_BYTES);
  for (int kb = 0; kb < blocks; ++kb) {
    const int s = kb % STAGES;
    const uint32_t phase = (kb / STAGES) & 1;
    const uint32_t k_addr = shared_addr(ks + s * L::KV_BYTES), v_addr = shared_addr(vs + s * L::KV_BYTES);

    // S = Q K^T over d in steps of 16: 32 bytes along a swizzled row, then the next 64-column box.
    float sc[kBKV / 2];
    bar_wait(&k_full[s], phase);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      Wgmma<T, kBKV>::ss(sc, descriptor(q_addr + (kk / 4) * kBQ * ROW_BYTES + (kk % 4) * 32, 16, 1024),
                         descriptor(k_addr + (kk / 4) * kBKV * ROW_BYTES + (kk % 4) * 32, 16, 1024), kk > 0);
    }
    wgmma_commit();
    wgmma_wait<0>();
    fence_operands(sc);

    // Online softmax. Entry 4j + e is key 8j + 2 (lane % 4) + e % 2 of row lane / 4 (e < 2) or + 8.
    const int key0 = kb * kBKV + (lane % 4) * 2;
    const bool partial = (kb + 1) * kBKV > length;
    float block_max[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int j = 0; j < kBKV / 8; ++j) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        float x = sc[4 * j + e] * scale_log2;
        if (partial && key0 + j * 8 + e % 2 >= length) x = -INFINITY;
        sc[4 * j + e] = x;
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
    uint32_t p[kBKV / 16][4];  // P as A fragments: keys 16c .. 16c + 15 are accumulator blocks 2c, 2c + 1
#pragma unroll
    for (int j = 0; j < kBKV / 8; ++j) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        sc[4 * j + e] = kl::fast_exp2(sc[4 * j + e] - row_max[e / 2]);
        row_sum[e / 2] += sc[4 * j + e];
      }
      p[j / 2][(j % 2) * 2] = kl::pack2<T>(sc[4 * j], sc[4 * j + 1]);
      p[j / 2][(j % 2) * 2 + 1] = kl::pack2<T>(sc[4 * j + 2], sc[4 * j + 3]);
    }
#pragma unroll
    for (int j = 0; j < D / 8; ++j) {
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[4 * j + e] *= correction[e / 2];
    }

    // O += P V over this block's keys in steps of 16: 16 rows of 128 bytes on; 64-column boxes of V are
    // kBKV rows apart (leading), 8-row groups 1024 bytes (stride).
    bar_wait(&v_full[s], phase);
    fence_operands(acc);
    wgmma_fence();
#pragma unroll
    for (int c = 0; c < kBKV / 16; ++c) {
      Wgmma<T, D>::rs(acc, p[c], descriptor(v_addr + c * 16 * ROW_BYTES, kBKV * ROW_BYTES, 1024));
    }
    wgmma_commit();
    wgmma_wait<0>();
    fence_operands(acc);
    bar_arrive(&empty[s]);
  }

  const int g = lane / 4, t2 = (lane % 4) * 2;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    // Every lane shuffles before any leaves for a row past the sequence: the quad's four must all take part.
    float total = row_sum[h] + kl::shfl_xor(row_sum[h], 1);
    total += kl::shfl_xor(total, 2);
    const float inv = 1.f / total;  // no valid key: 0 * (1 / 0) = NaN, as in the reference
    const int row = q0 + rows + warp * 16 + g + h * 8;
    if (row >= seq) continue;
    T* out = o + (size_t(bh) * seq + row) * D;
#pragma unroll
    for (int j = 0; j < D / 8; ++j) {
      *reinterpret_cast<uint32_t*>(out + j * 8 + t2) = kl::pack2<T>(acc[4 * j + 2 * h] * inv, acc[4 * j + 2 * h + 1] * inv);
    }
  }
#elif defined(__CUDA_ARCH__)
  __trap();  // a library without sm_90a code, run on a 9.0 GPU anyway: fail the launch, never return garbage
#endif
}

// q, k or v as (d, seq, batch * heads), read in boxes of 64 x `rows` x 1.
template <typename T>
bool qkv_map(CUtensorMap* map, const T* base, int bh, int seq, int d, int rows) {
  const cuuint64_t dims[3] = {cuuint64_t(d), cuuint64_t(seq), cuuint64_t(bh)};
  return tensor_map(map, base, 3, dims, rows);
}

template <typename T, int D>
cudaError_t launch_d(const T* q, const T* k, const T* v, const int* lengths, T* o, int batch, int heads, int seq,
                     cudaStream_t stream) {
  const int bh = batch * heads;
  CUtensorMap map_q, map_k, map_v;
  if (!qkv_map(&map_q, q, bh, seq, D, kBQ) || !qkv_map(&map_k, k, bh, seq, D, kBKV) ||
      !qkv_map(&map_v, v, bh, seq, D, kBKV))
    return cudaErrorNotSupported;  // no tensor-map encoder in this driver, or it refused the maps
  static const bool planned = registers_are(attention_wgmma_kernel<T, D>, registers_per_thread(THREADS));
  if (!planned) return cudaErrorInvalidDeviceFunction;
  constexpr int kSmem = Layout<D>::SMEM;
  const cudaError_t raised =
      cudaFuncSetAttribute(attention_wgmma_kernel<T, D>, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem);
  if (raised != cudaSuccess) return raised;
  const dim3 grid((seq + kBQ - 1) / kBQ, bh);
  const float scale_log2 = kl::kLog2e / sqrtf(static_cast<float>(D));
  attention_wgmma_kernel<T, D><<<grid, THREADS, kSmem, stream>>>(map_q, map_k, map_v, lengths, o, heads, seq,
                                                                  scale_log2);
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

cudaError_t launch_attention_wgmma(const __half* q, const __half* k, const __half* v, const int* lengths, __half* o,
                                   int batch, int heads, int seq, int d, cudaStream_t stream) {
  return launch(q, k, v, lengths, o, batch, heads, seq, d, stream);
}
cudaError_t launch_attention_wgmma(const __nv_bfloat16* q, const __nv_bfloat16* k, const __nv_bfloat16* v,
                                   const int* lengths, __nv_bfloat16* o, int batch, int heads, int seq, int d,
                                   cudaStream_t stream) {
  return launch(q, k, v, lengths, o, batch, heads, seq, d, stream);
}

#else  // CUDA 11: no TMA or wgmma; op.toml's `requires` keeps these from being called

cudaError_t launch_attention_wgmma(const __half*, const __half*, const __half*, const int*, __half*, int, int, int,
                                   int, cudaStream_t) {
  return cudaErrorNotSupported;
}
cudaError_t launch_attention_wgmma(const __nv_bfloat16*, const __nv_bfloat16*, const __nv_bfloat16*, const int*,
                                   __nv_bfloat16*, int, int, int, int, cudaStream_t) {
  return cudaErrorNotSupported;
}

#endif  // KL_HOPPER
