#include "kernellab_cuda.h"
#include "shared_race.h"

#include <torch/library.h>

namespace {

constexpr const char* kOp = "shared_race";

void shared_race(const at::Tensor& x, at::Tensor& out) {
  kl::check_cuda_input(x, kOp, "x", {at::kFloat});
  kl::check_like(out, x, kOp, "out", x.sizes());
  TORCH_CHECK(x.numel() % kRaceBlock == 0, kOp, ": n must be a multiple of ", kRaceBlock);
  const c10::cuda::CUDAGuard guard(x.device());
  kl::check_launch(launch_shared_race(kl::ptr<float>(x), kl::ptr<float>(out), x.numel(), kl::current_stream()),
                   kOp);
}

}  // namespace

KL_LIBRARY(m) {
  m.def("shared_race(Tensor x, Tensor(a!) out) -> ()", &shared_race);
}
