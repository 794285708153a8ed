// Hopper's (sm_90a) building blocks, shared by the wgmma kernels (matmul_wgmma.cu, attention_wgmma.cu):
// mbarriers, TMA copies with tensor maps, wgmma's shared-memory descriptors and fences. The device
// helpers exist only in sm_90a code (__CUDA_ARCH_FEAT_SM90_ALL); every other arch sees none of them, and
// the kernels that use them compile empty there (op.toml's `requires` keeps those from being called).
// The tensor-map encoder is host code: the driver's cuTensorMapEncodeTiled, found through the runtime, so
// that a library links no libcuda.
#pragma once

#include "kernellab.cuh"

#include <cuda.h>  // CUDA_VERSION, CUtensorMap and its enums

// TMA, wgmma and tensor maps came with CUDA 12.0. An older toolkit (a paper's CUDA 11) compiles the wgmma
// files to launchers that answer cudaErrorNotSupported; op.toml's `requires` keeps them from being called.
#if CUDA_VERSION >= 12000
#define KL_HOPPER 1
#include <cudaTypedefs.h>  // PFN_cuTensorMapEncodeTiled

namespace kl::hopper {

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)

__device__ __forceinline__ uint32_t shared_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void bar_init(uint64_t* bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(shared_addr(bar)), "r"(count));
}

// Makes the initialized barriers visible to the async proxy (TMA) before anything uses them.
__device__ __forceinline__ void bar_init_fence() { asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory"); }

__device__ __forceinline__ void bar_expect(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(shared_addr(bar)), "r"(bytes)
               : "memory");
}

__device__ __forceinline__ void bar_arrive(uint64_t* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(shared_addr(bar)) : "memory");
}

__device__ __forceinline__ uint64_t now_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %globaltimer;\n" : "=l"(t));
  return t;
}

// Waits for the phase of `bar` with this parity to complete. A phase that never completes is a bug in
// the pipeline (a wrong byte count, a wrong parity): after 10 s the kernel traps, so it fails with a
// launch error instead of hanging the GPU.
__device__ __forceinline__ void bar_wait(uint64_t* bar, uint32_t parity) {
  uint32_t done = 0;
  uint64_t since = 0;
  while (true) {
    asm volatile(
        "{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(shared_addr(bar)), "r"(parity)
        : "memory");
    if (done) return;
    if (since == 0) {
      since = now_ns();
    } else if (now_ns() - since > 10000000000ull) {
      __trap();
    }
  }
}

// One box of a 2-D or 3-D tensor map (c0: the contiguous coordinate) into shared memory; the copy's
// bytes count against `bar`'s expected transaction.
__device__ __forceinline__ void tma_load(void* dst, const CUtensorMap* map, uint64_t* bar, int c0, int c1) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4}], [%2];\n" ::"r"(
          shared_addr(dst)),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(shared_addr(bar)), "r"(c0), "r"(c1)
      : "memory");
}
__device__ __forceinline__ void tma_load(void* dst, const CUtensorMap* map, uint64_t* bar, int c0, int c1, int c2) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4, %5}], [%2];\n" ::"r"(
          shared_addr(dst)),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(shared_addr(bar)), "r"(c0), "r"(c1), "r"(c2)
      : "memory");
}

// A shared-memory matrix descriptor for a 128-byte-swizzled operand (PTX ISA, "Matrix Descriptor Format"):
// start address, leading and stride byte offsets, all in 16-byte units; layout type 1 = 128-byte swizzle.
// The start must lie in a ring whose swizzle atoms (8 rows of 128 bytes) start on 1024-byte boundaries.
__device__ __forceinline__ uint64_t descriptor(uint32_t addr, uint32_t leading, uint32_t stride) {
  return uint64_t((addr & 0x3FFFF) >> 4) | (uint64_t(leading >> 4) << 16) | (uint64_t(stride >> 4) << 32) |
         (uint64_t(1) << 62);
}

__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int PENDING>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(PENDING) : "memory");
}

#endif  // __CUDA_ARCH_FEAT_SM90_ALL

// Register lists for wgmma's inline assembly: the accumulators' operand numbers as one string, and the
// matching "+f" constraints of a float array.
#define KL_REGS32 \
  "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, " \
  "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
#define KL_REGS64 \
  KL_REGS32 ", %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, " \
  "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
#define KL_REGS128 \
  KL_REGS64 ", %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, " \
  "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, " \
  "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, " \
  "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127"
#define KL_ACC8(d, i)                                                                                        \
  "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]), "+f"(d[i + 5]), "+f"(d[i + 6]), \
      "+f"(d[i + 7])
#define KL_ACC32(d) KL_ACC8(d, 0), KL_ACC8(d, 8), KL_ACC8(d, 16), KL_ACC8(d, 24)
#define KL_ACC64(d) KL_ACC32(d), KL_ACC8(d, 32), KL_ACC8(d, 40), KL_ACC8(d, 48), KL_ACC8(d, 56)
#define KL_ACC128(d)                                                                                     \
  KL_ACC64(d), KL_ACC8(d, 64), KL_ACC8(d, 72), KL_ACC8(d, 80), KL_ACC8(d, 88), KL_ACC8(d, 96), KL_ACC8(d, 104), \
      KL_ACC8(d, 112), KL_ACC8(d, 120)

// Host side: tensor maps for TMA.

// cuTensorMapEncodeTiled from the driver, through the runtime: the library links no libcuda.
inline PFN_cuTensorMapEncodeTiled_v12000 encoder() {
  static const PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
    void* found = nullptr;
    cudaDriverEntryPointQueryResult result{};
#if CUDART_VERSION >= 12050
    const cudaError_t e = cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &found, 12000, cudaEnableDefault,
                                                           &result);
#else
    const cudaError_t e = cudaGetDriverEntryPoint("cuTensorMapEncodeTiled", &found, cudaEnableDefault, &result);
#endif
    return e == cudaSuccess && result == cudaDriverEntryPointSuccess
               ? reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(found)
               : nullptr;
  }();
  return fn;
}

// Registers per thread in a kernel of `threads` threads under __launch_bounds__(threads, 1): the SM's 65536
// shared out in ptxas' steps of 8 (168 for 384 threads). setmaxnreg can only move these between warpgroups.
constexpr int registers_per_thread(int threads) { return 65536 / threads / 8 * 8; }

// Whether ptxas gave `kernel` exactly `count` registers per thread in the code this GPU runs. A kernel that
// splits its registers between warpgroups with setmaxnreg counts on that figure: with fewer, the consumers'
// increase is never granted and they wait forever, so its launcher asks this first (once; it costs
// microseconds).
template <typename Kernel>
bool registers_are(Kernel* kernel, int count) {
  cudaFuncAttributes attributes{};
  return cudaFuncGetAttributes(&attributes, kernel) == cudaSuccess && attributes.numRegs == count;
}

template <typename T>
constexpr CUtensorMapDataType kTmaType = CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
template <>
constexpr CUtensorMapDataType kTmaType<__nv_bfloat16> = CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;

// A row-major tensor of `rank` (2 or 3) dims (dims[0] contiguous, each a whole number of 16-byte rows)
// read in boxes of 64 contiguous elements (one 128-byte swizzle row) by box_rows rows (by 1 in dim 2),
// 128-byte swizzled. Coordinates past a dim read as zero. False when there is no encoder or it refuses.
template <typename T>
bool tensor_map(CUtensorMap* map, const T* base, int rank, const cuuint64_t* dims, int box_rows) {
  if (encoder() == nullptr) return false;
  const cuuint64_t strides[2] = {dims[0] * sizeof(T), dims[0] * dims[1] * sizeof(T)};
  const cuuint32_t box[3] = {64, cuuint32_t(box_rows), 1};
  const cuuint32_t steps[3] = {1, 1, 1};
  return encoder()(map, kTmaType<T>, rank, const_cast<T*>(base), dims, strides, box, steps,
                   CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                   CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

}  // namespace kl::hopper

#endif  // CUDA_VERSION >= 12000
