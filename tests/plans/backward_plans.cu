// Host code only (no GPU needed): every norm backward plan of kernels/_common/rowwise.cuh, over some 130K shapes,
// launches a block its kernel variant accepts. The variant is what kl::dispatch_backward picks; its block limit is
// backward_block_limit<N, PER>() (its __launch_bounds__). Also: a block of several rows only where a thread holds
// at most 16 elements (the several-rows epilogue, Sums::kBlockRows, is compiled for those only), and no packs per
// thread the dispatch does not compile. Exit status 1 and the first bad plans printed when any fails.
// Built and run by tests/test_debian_docker.py in the cu124-debian image (nvcc, no GPU).
#include <cstdio>

#include "rowwise.cuh"

namespace {

struct Limits {
  int threads = 0;
  bool compiled = false;
};

Limits limits(int pack, const kl::RowPlan& p) {
  Limits l;
  auto take = [&](auto n, auto per) {
    l.threads = kl::backward_block_limit<decltype(n)::value, decltype(per)::value>();
    l.compiled = true;
  };
  if (pack == 1) {
    kl::dispatch_per_thread(p.per_thread, [&](auto per) { take(std::integral_constant<int, 1>{}, per); });
  } else if (pack == 4) {
    kl::dispatch_per_thread<32 / 4>(p.per_thread, [&](auto per) { take(std::integral_constant<int, 4>{}, per); });
  } else {
    kl::dispatch_per_thread<32 / 8>(p.per_thread, [&](auto per) { take(std::integral_constant<int, 8>{}, per); });
  }
  return l;
}

}  // namespace

int main() {
  int plans = 0, bad = 0;
  for (bool spread : {true, false}) {
    for (int pack : {1, 4, 8}) {
      for (int64_t rows : {1, 2, 3, 4, 8, 17, 31, 32, 33, 64, 100, 131, 132, 133, 200, 264, 1000, 4096, 70001}) {
        for (int64_t cols = pack; cols <= 70000; cols += cols < 2048 ? pack : cols < 20000 ? 8 * pack : 64 * pack) {
          const kl::RowPlan p = kl::plan_backward_rows(rows, cols, pack, true, 132, spread);
          const Limits l = limits(pack, p);
          const bool over = p.threads() > l.threads, several = p.rows_per_block > 1 && pack * p.per_thread > 16;
          ++plans;
          if (!l.compiled || over || several) {
            if (++bad <= 10) {
              std::printf("spread %d pack %d, %lld x %lld: group %d, %d packs a thread, %d rows a block, %d threads "
                          "(the kernel takes %d)%s%s\n",
                          int(spread), pack, static_cast<long long>(rows), static_cast<long long>(cols), p.group,
                          p.per_thread, p.rows_per_block, p.threads(), l.threads,
                          l.compiled ? "" : ": no kernel compiled for it", several ? ": several rows past 16 elements" : "");
            }
          }
        }
      }
    }
  }
  std::printf("%d backward plans, %d that do not launch\n", plans, bad);
  return bad == 0 ? 0 : 1;
}
