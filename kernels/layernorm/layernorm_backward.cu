// LayerNorm's backward. With xhat = (x - mean) * rstd (mean and rstd recomputed from x as the forward does:
// shifted by the row's first element) and gw = grad_out * w:
//   grad_x = rstd * (gw - mean(gw) - xhat * mean(gw * xhat)),  grad_w = sum over rows of grad_out * xhat,
//   grad_b = sum over rows of grad_out.
// A group of threads per row as in the forward, x and grad_out read once (kl::BackwardRows: 2-byte types staged
// through shared memory, the next row in flight during this one; float32 held in registers); a grid of
// as many blocks as fit at once, each looping over rows and keeping its columns' grad_w and grad_b sums in
// registers, then one row of float32 partials per block, added up by kl::column_sums; a handful of rows
// (decoding) instead stores each row's mean and rstd, and kl::weight_grads sums the columns from x and
// grad_out (kl::backward_uses_stats: no partial rows, four times grad_x's bytes at fp16). Everything a row
// needs is one reduction of four sums (d, d^2, gw, gw * d with d = x - x[0]): mean(gw * xhat) is
// rstd * (mean(gw * d) - mean(d) * mean(gw)), so the statistics and the gradient's two means are reduced
// together; three reductions in turn had left the 4096x4096 rows at 0.87x of Liger-Kernel's (which reads a
// mean and rstd the forward stored). Fewer instructions an element did not pay: grad_x as two FMAs (one fewer) and
// the weight held as floats where a thread holds it (two conversions fewer) moved the spans -2.4% to +1.6%, 8192x5120
// float16 +3.9% with the FMAs alone (H200, 2026-11-30; rmsnorm's likewise): these kernels do not wait on issue
// alone. Nor on DRAM: the 2-byte ones' time follows 77-79% of the SM clock's change (`invoke profile --clocks`), and
// rows asked two turns ahead into L2 hit there without gaining (results/h200-clocks). What holds them is on the SM,
// and not its instruction count alone: the staged rows' copies taken off every thread (kl::BackwardRows, bulk copies)
// lost. Each row's reduction is 5-15% of a span (a bound with none), its partial rows 8-15% (results/h200-norms).
#include "kernellab.cuh"
#include "layernorm.h"
#include "rowwise.cuh"

namespace {

// Whether a variant is launched as 3 blocks of 256 an SM (80 registers a thread) instead of kl::backward_block_limit
// and backward_min_blocks: the 2-byte one of several rows per block at 16 elements a thread (<8, 2>, Sums::kBlockRows,
// whose blocks are 256 threads at most: plan_rows). At 2 blocks of 512 (64 registers) it spilled 80 bytes (fp16, none
// at 80; bf16 124 -> 40). H200 kernel times, fp16, 16384 rows: 768 columns 39.6 -> 35.7 us, 1024 51.8 -> 40.6, 2048
// 98.1 -> 72.7. (rmsnorm's <8, 2> does not spill at 64, and lost at 80: 16384x2048 bf16 64.5 -> 69.1 us.)
template <int N, int PER, kl::Sums S>
constexpr bool three_blocks() {
  return S == kl::Sums::kBlockRows && N == 8 && PER == 2;
}

template <typename T, int N, int PER, kl::Sums S, bool STAGED>
__global__ void __launch_bounds__(three_blocks<N, PER, S>() ? kl::kRowBlockThreads : kl::backward_block_limit<N, PER>(),
                                  three_blocks<N, PER, S>() ? 3 : kl::backward_min_blocks<N, PER>())
    layernorm_backward_kernel(const T* __restrict__ dy, const T* __restrict__ x, const T* __restrict__ w,
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
  float* part_b = partial + (int64_t(gridDim.x) + blockIdx.x) * cols;
  const P* pw = reinterpret_cast<const P*>(w);
  kl::ColumnSums<N, PER, S, 4> sum_w(shared, packs, lane, group), sum_b(shared + cols, packs, lane, group);
  const kl::BackwardWeight<T, N, PER> wr(pw, packs, kl::RowThread{0, lane, group}, true);
  const int64_t stride = int64_t(gridDim.x) * rows_per_block;
  const int64_t first = int64_t(blockIdx.x) * rows_per_block + local;
  kl::BackwardRows<T, N, PER, S, 4, STAGED> rows_in(x, dy, rows, cols, packs, shared, first,
                                                     kl::RowThread{first, lane, group});
  // Every thread of the block takes the same number of turns (the reductions synchronise the block).
  for (int64_t base = int64_t(blockIdx.x) * rows_per_block; base < rows; base += stride) {
    const int64_t row = base + local;
    const bool valid = row < rows;
    const int64_t offset = valid ? row * cols : 0;
    const kl::RowThread t{row, lane, group};
    rows_in.turn(offset, row + stride, valid, t, [&](const auto& xr, const auto& gr, float x0) {  // x0: the shift
      float4 s = {0.f, 0.f, 0.f, 0.f};  // sums of d, d^2, gw, gw * d
      xr.for_each([&](const P& p, int k, int i) {
        const P g = gr.at(k, i), wk = wr.at(k, i);
#pragma unroll
        for (int j = 0; j < N; ++j) {
          const float d = kl::to_float(p.v[j]) - x0, gw = kl::to_float(g.v[j]) * kl::to_float(wk.v[j]);
          s.x += d;
          s.y = fmaf(d, d, s.y);
          s.z += gw;
          s.w = fmaf(gw, d, s.w);
        }
      });
      s = kl::group_sum4(s, group);
      const float mean_d = s.x * inv_cols, mean = x0 + mean_d;
      const float rstd = rsqrtf(fmaxf(s.y * inv_cols - mean_d * mean_d, 0.f) + eps);
      const float a = s.z * inv_cols, b = rstd * (s.w * inv_cols - mean_d * a);  // mean(gw), mean(gw * xhat)
      if (S == kl::Sums::kStats && valid && lane == 0) {
        reinterpret_cast<float2*>(partial)[row] = make_float2(mean, rstd);
      }
      P* out = reinterpret_cast<P*>(dx + offset);
      xr.for_each([&](const P& p, int k, int i) {
        const P g = gr.at(k, i), wk = wr.at(k, i);
        float gx[N], gf[N];
        P o;
#pragma unroll
        for (int j = 0; j < N; ++j) {
          const float xhat = (kl::to_float(p.v[j]) - mean) * rstd;
          gf[j] = kl::to_float(g.v[j]);
          gx[j] = gf[j] * xhat;
          o.v[j] = kl::from_float<T>(rstd * (gf[j] * kl::to_float(wk.v[j]) - fmaf(xhat, b, a)));
        }
        kl::store_pack(out + k, o);
        if constexpr (S != kl::Sums::kStats) {
          sum_w.add(k, i, gx, part_w);
          sum_b.add(k, i, gf, part_b);
        }
      });
    });
  }
  rows_in.finish();
  if constexpr (S != kl::Sums::kStats) {
    sum_w.write(part_w, shared, packs, lane, group, static_cast<int>(cols));
    sum_b.write(part_b, shared, packs, lane, group, static_cast<int>(cols));
  }
}

// Whether this device stages 2-byte rows at 4 packs a thread in blocks of 256 (kl::plan_layernorm_backward's `wide`).
template <typename T>
bool stages_wide_rows() {
  if constexpr (sizeof(T) == 2) {
    constexpr auto kOneRow = kl::Sums::kOneRow;
    constexpr auto staged = &layernorm_backward_kernel<T, 8, 4, kOneRow, true>;
    constexpr auto plain = &layernorm_backward_kernel<T, 8, 4, kOneRow, false>;
    return kl::stages_at<staged, plain, 8, 4, kOneRow, 4>(kl::kRowBlockThreads, 2);
  }
  return false;
}

template <typename T>
kl::RowPlan plan(const T* dy, const T* x, const T* w, const T* dx, const T* dw, const T* db, int64_t rows,
                 int64_t cols) {
  const bool aligned = kl::aligned16(dy) && kl::aligned16(x) && kl::aligned16(w) && kl::aligned16(dx) &&
                       kl::aligned16(dw) && kl::aligned16(db);
  return kl::plan_layernorm_backward<T>(rows, cols, aligned, kl::sm_count(), stages_wide_rows<T>());
}

template <typename T>
int64_t workspace(const T* dy, const T* x, const T* w, const T* dx, const T* dw, const T* db, int64_t rows,
                  int64_t cols) {
  if (rows == 0 || cols == 0) return 0;
  const kl::RowPlan p = plan(dy, x, w, dx, dw, db, rows, cols);
  return kl::backward_workspace(p, rows, 2 * kl::backward_grid_bound(p, kl::sm_count()) * cols);
}

template <typename T>
cudaError_t launch(const T* dy, const T* x, const T* w, T* dx, T* dw, T* db, float* ws, int64_t rows, int64_t cols,
                   float eps, cudaStream_t stream) {
  if (cols == 0) return cudaSuccess;
  if (rows == 0) {  // no rows: zero gradients for the weight and bias
    cudaMemsetAsync(dw, 0, cols * sizeof(T), stream);
    cudaMemsetAsync(db, 0, cols * sizeof(T), stream);
    return cudaGetLastError();
  }
  const kl::RowPlan p = plan(dy, x, w, dx, dw, db, rows, cols);
  const int sms = kl::sm_count();
  // A handful of rows: each row's statistics (in the workspace), and the weight's gradients from them.
  const bool stats = kl::backward_uses_stats(p, rows);
  int grid = 0;
  auto go = [&](auto kernel, size_t smem) {
    constexpr auto k = decltype(kernel)::value;
    grid = kl::backward_grid<k>(p, smem, sms);
    kl::launch_backward_kernel<k>(p, grid, smem, ws, 2 * grid * cols, stream, dy, x, w, dx, ws, rows, cols, eps,
                                  p.shift);
  };
  kl::dispatch_backward<T, true>(p, stats, [&](auto n, auto per, auto sums) {
    constexpr int N = decltype(n)::value, PER = decltype(per)::value;
    constexpr kl::Sums S = decltype(sums)::value;
    const auto kernel = [](auto staged) {
      return kl::Kernel<&layernorm_backward_kernel<T, N, PER, S, decltype(staged)::value>>{};
    };
    kl::launch_staged_or_not<N, PER, S, 4>(p, cols, 2, kernel, go);
  });
  kl::launch_weight_grads<T>(stats, dy, x, ws, grid, rows, cols, dw, db, stream);
  return cudaGetLastError();
}

}  // namespace

#define KL_LAYERNORM_BACKWARD(T)                                                                                  \
  int64_t layernorm_backward_workspace(const T* dy, const T* x, const T* w, const T* dx, const T* dw, const T* db, \
                                       int64_t rows, int64_t cols) {                                             \
    return workspace(dy, x, w, dx, dw, db, rows, cols);                                                           \
  }                                                                                                               \
  cudaError_t launch_layernorm_backward(const T* dy, const T* x, const T* w, T* dx, T* dw, T* db, float* workspace, \
                                        int64_t rows, int64_t cols, float eps, cudaStream_t stream) {            \
    return launch(dy, x, w, dx, dw, db, workspace, rows, cols, eps, stream);                                      \
  }
KL_LAYERNORM_BACKWARD(float)
KL_LAYERNORM_BACKWARD(__half)
KL_LAYERNORM_BACKWARD(__nv_bfloat16)
