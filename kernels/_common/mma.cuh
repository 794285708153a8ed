// Tensor-core building blocks for sm_80 and newer (mma.sync, ldmatrix, cp.async), used by the
// matmul and attention kernels (cp.async also by the norms' backwards). Fragment layouts are those of PTX's
// m16n8k16 (row.col):
//   A (16x16, row-major):  a[0] = (row g, k 2t..2t+1), a[1] = (g+8, 2t), a[2] = (g, 2t+8), a[3] = (g+8, 2t+8)
//   B (16x8,  k-major):    b[0] = (k 2t..2t+1, col g), b[1] = (k 2t+8.., col g)
//   C (16x8,  fp32):       c[0..1] = (row g, cols 2t, 2t+1), c[2..3] = (row g+8, cols 2t, 2t+1)
// where g = lane / 4 and t = lane % 4.
#pragma once

#include "kernellab.cuh"

#include <cstdint>

namespace kl {

__device__ __forceinline__ uint32_t smem_address(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// 16 bytes global -> shared without passing through registers; `valid == false` writes zeros
// (source size 0), which is how tiles hanging over the matrix edge read as zero. The "memory" clobbers keep the
// compiler from moving shared-memory reads across the copies and waits: the norms' staged rows (BackwardRows in
// rowwise.cuh) read them with no __syncthreads between. (The matmul and attention kernels' SASS is the same with them.)
__device__ __forceinline__ void cp_async16(void* smem, const void* gmem, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_address(smem)), "l"(gmem),
               "r"(valid ? 16 : 0)
               : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int PENDING>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(PENDING) : "memory");
}

// A ROWS x COLS tile of a row-major matrix (row stride `ld`, starting at `src`) into shared memory
// (row stride DST_LD), by THREADS threads. Elements outside rows_left x cols_left read as zero.
// kAligned: `src` rows are 16-byte aligned and cols_left is a multiple of 8, so 16-byte cp.async
// chunks do the copy; otherwise plain loads fill the tile (synchronously).
template <int ROWS, int COLS, int DST_LD, int THREADS, bool kAligned = true, typename T>
__device__ __forceinline__ void load_tile(T* dst, const T* src, int ld, int rows_left, int cols_left) {
  constexpr int kChunksPerRow = COLS / 8;
  static_assert((ROWS * kChunksPerRow) % THREADS == 0, "whole 16-byte chunks per thread");
#pragma unroll
  for (int i = 0; i < ROWS * kChunksPerRow / THREADS; ++i) {
    const int chunk = threadIdx.x + i * THREADS;
    const int r = chunk / kChunksPerRow, c = (chunk % kChunksPerRow) * 8;
    T* d = dst + r * DST_LD + c;
    if constexpr (kAligned) {
      const bool inside = r < rows_left && c < cols_left;
      cp_async16(d, inside ? src + size_t(r) * ld + c : src, inside);
    } else {
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        d[j] = (r < rows_left && c + j < cols_left) ? src[size_t(r) * ld + c + j] : from_float<T>(0.f);
      }
    }
  }
}

// Four 8x8 b16 matrices; lane i gives the address of row i % 8 of matrix i / 8.
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* smem) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_address(smem)));
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const void* smem) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_address(smem)));
}

// d += a * b on the tensor cores, fp32 accumulation. Not volatile: it only reads and writes
// registers, so the compiler may interleave it with the next fragments' ldmatrix.
template <typename T>
__device__ __forceinline__ void mma_16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1);

template <>
__device__ __forceinline__ void mma_16816<__half>(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
template <>
__device__ __forceinline__ void mma_16816<__nv_bfloat16>(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                                         uint32_t b1) {
  asm(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Two floats rounded to T and packed into one register, `lo` in the low half (the lower column).
template <typename T>
__device__ __forceinline__ uint32_t pack2(float lo, float hi);
template <>
__device__ __forceinline__ uint32_t pack2<__half>(float lo, float hi) {
  const __half2 h = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&h);
}
template <>
__device__ __forceinline__ uint32_t pack2<__nv_bfloat16>(float lo, float hi) {
  const __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&h);
}

}  // namespace kl
