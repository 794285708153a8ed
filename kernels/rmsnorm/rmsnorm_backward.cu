// RMSNorm's backward. With xhat = x * rstd (rstd recomputed from x, exactly as the forward does) and
// gw = grad_out * w:
//   grad_x = rstd * (gw - xhat * mean(gw * xhat)),  grad_w = sum over rows of grad_out * xhat.
// A group of threads per row as in the forward, x and grad_out read once (kl::BackwardRows: 2-byte types staged
// through shared memory, the next row in flight during this one; float32 held in registers); a grid of
// as many blocks as fit at once, each looping over rows and keeping its columns' grad_w sums in registers,
// then one row of float32 partials per block, added up by kl::column_sums (a handful of rows: each row's rstd,
// and kl::weight_grads sums the columns from x and grad_out). One reduction of two sums
// (x^2, gw * x) gives rstd and mean(gw * xhat) = rstd * mean(gw * x) at once.
#include "kernellab.cuh"
#include "rmsnorm.h"
#include "rowwise.cuh"

namespace {

template <typename T, int N, int PER, kl::Sums S, bool STAGED>
__global__ void __launch_bounds__(kl::backward_block_limit<N, PER>(), kl::backward_min_blocks<N, PER>())
    rmsnorm_backward_kernel(const T* __restrict__ dy, const T* __restrict__ x, const T* __restrict__ w,
                              T* __restrict__ dx, float* __restrict__ partial, int64_t rows, int64_t cols, float eps,
                              int shift) {
  extern __shared__ __align__(16) float shared[];  // float4 rows (ColumnSums)
  kl::wait_for_primary();   // launched early (kl::launch_dependent): dy may be the result of the kernel before
  kl::launch_dependents();  // the weight's gradient kernel may start, once every block has waited
  using P = kl::Pack<T, N>;
  const int rows_per_block = blockDim.x >> shift, group = 1 << shift;
  const int lane = threadIdx.x & (group - 1), local = threadIdx.x >> shift;
  const int packs = static_cast<int>(cols / N);
  const float inv_cols = 1.f / static_cast<float>(cols);
  float* part_w = partial + int64_t(blockIdx.x) * cols;
  const P* pw = reinterpret_cast<const P*>(w);
  kl::ColumnSums<N, PER, S, 2> sum_w(shared, packs, lane, group);
  const kl::BackwardWeight<T, N, PER> wr(pw, packs, kl::RowThread{0, lane, group}, true);
  const int64_t stride = int64_t(gridDim.x) * rows_per_block;
  const int64_t first = int64_t(blockIdx.x) * rows_per_block + local;
  kl::BackwardRows<T, N, PER, S, 2, STAGED> rows_in(x, dy, rows, cols, packs, shared, first,
                                                     kl::RowThread{first, lane, group});
  // Every thread of the block takes the same number of turns (the reductions synchronise the block).
  for (int64_t base = int64_t(blockIdx.x) * rows_per_block; base < rows; base += stride) {
    const int64_t row = base + local;
    const bool valid = row < rows;
    const int64_t offset = valid ? row * cols : 0;
    const kl::RowThread t{row, lane, group};
    rows_in.turn(offset, row + stride, valid, t, [&](const auto& xr, const auto& gr, float) {
      float2 s = {0.f, 0.f};  // sums of x^2 and gw * x
      xr.for_each([&](const P& p, int k, int i) {
        const P g = gr.at(k, i), wk = wr.at(k, i);
#pragma unroll
        for (int j = 0; j < N; ++j) {
          const float v = kl::to_float(p.v[j]);
          s.x = fmaf(v, v, s.x);
          s.y = fmaf(kl::to_float(g.v[j]) * kl::to_float(wk.v[j]), v, s.y);
        }
      });
      s = kl::group_sum2(s, group);
      const float rstd = rsqrtf(s.x * inv_cols + eps);
      const float b = rstd * s.y * inv_cols;  // mean(gw * xhat)
      if (S == kl::Sums::kStats && valid && lane == 0) reinterpret_cast<float2*>(partial)[row] = make_float2(0.f, rstd);
      P* out = reinterpret_cast<P*>(dx + offset);
      xr.for_each([&](const P& p, int k, int i) {
        const P g = gr.at(k, i), wk = wr.at(k, i);
        float gx[N];
        P o;
#pragma unroll
        for (int j = 0; j < N; ++j) {
          const float xhat = kl::to_float(p.v[j]) * rstd, gf = kl::to_float(g.v[j]);
          gx[j] = gf * xhat;
          o.v[j] = kl::from_float<T>(rstd * (gf * kl::to_float(wk.v[j]) - xhat * b));
        }
        kl::store_pack(out + k, o);
        if constexpr (S != kl::Sums::kStats) sum_w.add(k, i, gx, part_w);
      });
    });
  }
  rows_in.finish();
  if constexpr (S != kl::Sums::kStats) sum_w.write(part_w, shared, packs, lane, group, static_cast<int>(cols));
}

template <typename T>
kl::RowPlan plan(const T* dy, const T* x, const T* w, const T* dx, const T* dw, int64_t rows, int64_t cols) {
  const bool aligned = kl::aligned16(dy) && kl::aligned16(x) && kl::aligned16(w) && kl::aligned16(dx) &&
                       kl::aligned16(dw);
  return kl::plan_backward_rows(rows, cols, kl::kPack16<T>, aligned, kl::sm_count());
}

template <typename T>
int64_t workspace(const T* dy, const T* x, const T* w, const T* dx, const T* dw, int64_t rows, int64_t cols) {
  if (rows == 0 || cols == 0) return 0;
  const kl::RowPlan p = plan(dy, x, w, dx, dw, rows, cols);
  return kl::backward_workspace(p, rows, kl::backward_grid_bound(p, kl::sm_count()) * cols);
}

template <typename T>
cudaError_t launch(const T* dy, const T* x, const T* w, T* dx, T* dw, float* ws, int64_t rows, int64_t cols,
                   float eps, cudaStream_t stream) {
  if (cols == 0) return cudaSuccess;
  if (rows == 0) {  // no rows: a zero gradient for the weight
    cudaMemsetAsync(dw, 0, cols * sizeof(T), stream);
    return cudaGetLastError();
  }
  const kl::RowPlan p = plan(dy, x, w, dx, dw, rows, cols);
  const int sms = kl::sm_count();
  // A handful of rows: each row's statistics (in the workspace), and the weight's gradients from them.
  const bool stats = kl::backward_uses_stats(p, rows);
  int grid = 0;
  auto go = [&](auto kernel, size_t smem) {
    constexpr auto k = decltype(kernel)::value;
    grid = kl::backward_grid<k>(p, smem, sms);
    kl::launch_backward_kernel<k>(p, grid, smem, ws, grid * cols, stream, dy, x, w, dx, ws, rows, cols, eps, p.shift);
  };
  kl::dispatch_backward<T>(p, stats, [&](auto n, auto per, auto sums) {
    constexpr int N = decltype(n)::value, PER = decltype(per)::value;
    constexpr kl::Sums S = decltype(sums)::value;
    const auto kernel = [](auto staged) {
      return kl::Kernel<&rmsnorm_backward_kernel<T, N, PER, S, decltype(staged)::value>>{};
    };
    kl::launch_staged_or_not<N, PER, S, 2>(p, cols, 1, kernel, go);
  });
  kl::launch_weight_grads<T>(stats, dy, x, ws, grid, rows, cols, dw, nullptr, stream);
  return cudaGetLastError();
}

}  // namespace

#define KL_RMSNORM_BACKWARD(T)                                                                                     \
  int64_t rmsnorm_backward_workspace(const T* dy, const T* x, const T* w, const T* dx, const T* dw, int64_t rows,    \
                                     int64_t cols) {                                                                \
    return workspace(dy, x, w, dx, dw, rows, cols);                                                                 \
  }                                                                                                                 \
  cudaError_t launch_rmsnorm_backward(const T* dy, const T* x, const T* w, T* dx, T* dw, float* workspace,          \
                                      int64_t rows, int64_t cols, float eps, cudaStream_t stream) {                 \
    return launch(dy, x, w, dx, dw, workspace, rows, cols, eps, stream);                                            \
  }
KL_RMSNORM_BACKWARD(float)
KL_RMSNORM_BACKWARD(__half)
KL_RMSNORM_BACKWARD(__nv_bfloat16)
