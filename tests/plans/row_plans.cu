// Host code only (no GPU needed): every row plan of kernels/_common/rowwise.cuh, over some 2.2M shapes on GPUs of
// 108 SMs (A100), 114 (H100 PCIe) and 132 (H100 SXM, H200), launches a block its kernel accepts.
// Backwards (plan_backward_rows, with and without the 2-byte spread, and layernorm's plan_layernorm_backward, float32
// aligned and not, float16 and bfloat16, on devices that stage wide rows and not): the variant kl::dispatch_backward
// picks, bounded by backward_block_limit<N, PER>(); a block of several rows only where a thread holds at most 16
// elements (the several-rows epilogue, Sums::kBlockRows, is compiled for those only; layernorm's, up to 32 for 2-byte
// types: its `wide` plan and dispatch_backward's WIDE), and of at most kRowBlockThreads for 16-byte
// packs of a 2-byte type (layernorm's three_blocks variant is bounded so; the check is stricter than that variant
// needs); no packs per thread the dispatch does not compile. Forwards (plan_rows, and plan_norm_forward for float32):
// row_block_limit<N, PER>(). Exit status 1 and the first bad plans printed when any fails.
// Built and run by tests/test_debian_docker.py in the cu124-debian image (nvcc, no GPU).
#include <cstdio>

#include "rowwise.cuh"

namespace {

// The block limit (__launch_bounds__) of the kernel launched for plan p, or 0 when none is compiled for its packs a
// thread: backwards compile up to 32 elements a thread (kl::dispatch_backward), forwards up to 8 packs.
template <bool BACKWARD, int N>
int block_limit(const kl::RowPlan& p) {
  int limit = 0;
  constexpr int kMaxPer = BACKWARD && N > 1 ? 32 / N : 8;
  kl::dispatch_per_thread<kMaxPer>(p.per_thread, [&](auto per) {
    constexpr int PER = decltype(per)::value;
    limit = BACKWARD ? kl::backward_block_limit<N, PER>() : kl::row_block_limit<N, PER>();
  });
  return limit;
}

template <bool BACKWARD>
int block_limit(int pack, const kl::RowPlan& p) {
  if (pack == 1) return block_limit<BACKWARD, 1>(p);
  return pack == 4 ? block_limit<BACKWARD, 4>(p) : block_limit<BACKWARD, 8>(p);
}

}  // namespace

int main() {
  int plans = 0, bad = 0;
  // backward with the spread, backward without, forward, float32 norm forward, layernorm backward (pack 1: float32
  // unaligned, 4: float32, 8: float16), layernorm backward bfloat16; 6 and 7: layernorm's float16 and bfloat16 on a
  // device that stages wide rows (plan_layernorm_backward's `wide`)
  for (int sms : {108, 114, 132}) {
    for (int kind : {0, 1, 2, 3, 4, 5, 6, 7}) {
      const bool spread = kind == 0, backward = kind < 2 || kind >= 4, wide = kind >= 6;
      for (int pack : {1, 4, 8}) {
        if ((kind == 3 && pack != 4) || ((kind == 5 || wide) && pack != 8)) continue;
        for (int64_t rows : {1, 2, 3, 4, 8, 17, 31, 32, 33, 64, 100, 107, 108, 109, 113, 114, 115, 131, 132, 133, 200,
                              264, 1000, 4096, 70001}) {
          for (int64_t cols = pack; cols <= 70000; cols += cols < 2048 ? pack : cols < 20000 ? 8 * pack : 64 * pack) {
            const kl::RowPlan p = kind == 7 ? kl::plan_layernorm_backward<__nv_bfloat16>(rows, cols, true, sms, true)
                                  : kind == 6 ? kl::plan_layernorm_backward<__half>(rows, cols, true, sms, true)
                                  : kind == 5 ? kl::plan_layernorm_backward<__nv_bfloat16>(rows, cols, true, sms)
                                  : kind == 4 ? (pack == 8 ? kl::plan_layernorm_backward<__half>(rows, cols, true, sms)
                                               : kl::plan_layernorm_backward<float>(rows, cols, pack == 4, sms))
                                  : backward  ? kl::plan_backward_rows(rows, cols, pack, true, sms, spread)
                                  : kind == 3 ? kl::plan_norm_forward<float>(rows, cols, true, sms)
                                              : kl::plan_rows(rows, cols, pack, true, sms);
            const int limit = backward ? block_limit<true>(pack, p) : block_limit<false>(pack, p);
            const bool over = p.threads() > limit;
            const bool several = backward && p.rows_per_block > 1 &&
                                 (pack * p.per_thread > (wide ? 32 : 16) ||
                                  (pack == 8 && p.threads() > kl::kRowBlockThreads));
            ++plans;
            if (limit == 0 || over || several) {
              if (++bad <= 10) {
                const char* what = wide        ? "layernorm backward, wide"
                                   : kind >= 4   ? "layernorm backward"
                                   : backward  ? (spread ? "backward" : "backward, no spread")
                                   : kind == 3 ? "float32 norm forward"
                                               : "forward";
                std::printf("%d SMs, %s pack %d, %lld x %lld: group %d, %d packs a thread, %d rows a block, %d threads "
                            "(the kernel takes %d)%s%s\n",
                            sms, what, pack, static_cast<long long>(rows), static_cast<long long>(cols), p.group,
                            p.per_thread, p.rows_per_block, p.threads(), limit,
                            limit ? "" : ": no kernel compiled for it",
                            several ? ": several rows past 16 elements or 256 threads" : "");
              }
            }
          }
        }
      }
    }
  }
  std::printf("%d row plans, %d that do not launch\n", plans, bad);
  return bad == 0 ? 0 : 1;
}
