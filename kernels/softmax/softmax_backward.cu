// Softmax's backward from its output y: grad_x = y * (grad_out - sum(grad_out * y)) per row. The forward's
// layout (kernels/_common/rowwise.cuh): a group of threads per row, y and grad_out held in registers (read
// once), one reduction, each gradient written once. Launched as a programmatic dependent launch of the kernel before
// it (kl::launch_dependent): where that is the forward (a training step's softmax, then its backward with nothing
// between, as in the bench's full pass), which lets dependents start at once, the backward's blocks are on their SMs
// when it ends and wait there (kl::wait_for_primary) before reading anything: y is the forward's result, and
// grad_out may be the result of whatever kernel came before.
#include "kernellab.cuh"
#include "rowwise.cuh"
#include "softmax.h"

namespace {

template <typename T, int N, int PER>
__global__ void __launch_bounds__(kl::backward_block_limit<N, PER>())
    softmax_backward_kernel(const T* __restrict__ dy, const T* __restrict__ y, T* __restrict__ dx, int64_t rows,
                            int64_t cols, int shift) {
  kl::wait_for_primary();
  using P = kl::Pack<T, N>;
  const kl::RowThread t = kl::row_thread(shift);
  const bool valid = t.row < rows;
  const int64_t offset = valid ? t.row * cols : 0;
  const int packs = static_cast<int>(cols / N);
  const kl::RowPacks<P, PER> yr(reinterpret_cast<const P*>(y + offset), packs, t, valid);
  const kl::RowPacks<P, PER> gr(reinterpret_cast<const P*>(dy + offset), packs, t, valid);
  // float32 arithmetic for every type, as torch.compile's kernel. Liger-Kernel's float16 kernel computes in float16
  // (HFMA2, HADD2): half the instructions; copied here it took 4x8192 from 2.25 to 2.12 us and tripled the largest
  // error at 16384x1024 (H200). Four accumulators, an unrolled reduction or the floats kept for the second pass each
  // moved it within 1%: what is left at 4x8192 is outside the SMs' active cycles (results/h200-norms, 2026-11-30).
  float s = 0.f;
  yr.for_each([&](const P& p, int k, int i) {
    const P g = gr.at(k, i);
#pragma unroll
    for (int j = 0; j < N; ++j) s = fmaf(kl::to_float(g.v[j]), kl::to_float(p.v[j]), s);
  });
  const float total = kl::group_reduce<kl::Sum>(s, t.group);
  P* out = reinterpret_cast<P*>(dx + offset);
  yr.for_each([&](const P& p, int k, int i) {
    const P g = gr.at(k, i);
    P o;
#pragma unroll
    for (int j = 0; j < N; ++j) o.v[j] = kl::from_float<T>(kl::to_float(p.v[j]) * (kl::to_float(g.v[j]) - total));
    kl::store_pack(out + k, o);
  });
}

template <typename T>
cudaError_t launch(const T* dy, const T* y, T* dx, int64_t rows, int64_t cols, cudaStream_t stream) {
  if (rows == 0 || cols == 0) return cudaSuccess;
  const bool aligned = kl::aligned16(dy) && kl::aligned16(y) && kl::aligned16(dx);
  // float32's rows of 1024 and 4096 take 16 elements a thread at 60 registers (50% occupancy); at 8 (100%) or 32 (a
  // warp a row, 25%) they stayed within 0.5% (H200): this kernel moves its bytes at the memory's pace at any of them.
  // A handful of rows over 256 threads of twice the packs instead of 512: 4x8192 level (float16 2.19 -> 2.20 us, where
  // Liger-Kernel's kernel takes 1.9), 16 and 64 rows of 4096 -1.4% to -3.6%; not kept.
  const kl::RowPlan p = kl::plan_backward_rows(rows, cols, kl::kPack16<T>, aligned, kl::sm_count(), false);
  const dim3 grid(static_cast<unsigned>(p.blocks)), block(static_cast<unsigned>(p.threads()));
  if (p.pack == 1) {
    kl::dispatch_per_thread(p.per_thread, [&](auto per) {
      kl::launch_dependent<softmax_backward_kernel<T, 1, decltype(per)::value>>(grid, block, 0, stream, dy, y, dx,
                                                                                 rows, cols, p.shift);
    });
  } else {
    kl::dispatch_per_thread<32 / kl::kPack16<T>>(p.per_thread, [&](auto per) {
      kl::launch_dependent<softmax_backward_kernel<T, kl::kPack16<T>, decltype(per)::value>>(grid, block, 0, stream,
                                                                                              dy, y, dx, rows, cols,
                                                                                              p.shift);
    });
  }
  return cudaGetLastError();
}

}  // namespace

cudaError_t launch_softmax_backward(const float* dy, const float* y, float* dx, int64_t rows, int64_t cols,
                                    cudaStream_t stream) {
  return launch(dy, y, dx, rows, cols, stream);
}
cudaError_t launch_softmax_backward(const __half* dy, const __half* y, __half* dx, int64_t rows, int64_t cols,
                                    cudaStream_t stream) {
  return launch(dy, y, dx, rows, cols, stream);
}
cudaError_t launch_softmax_backward(const __nv_bfloat16* dy, const __nv_bfloat16* y, __nv_bfloat16* dx, int64_t rows,
                                    int64_t cols, cudaStream_t stream) {
  return launch(dy, y, dx, rows, cols, stream);
}
