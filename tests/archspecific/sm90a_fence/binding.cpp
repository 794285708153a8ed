#include "kernellab_cuda.h"
#include "sm90a_fence.h"

#include <torch/library.h>

namespace {

constexpr const char* kOp = "sm90a_fence";

void sm90a_fence(const at::Tensor& x, at::Tensor& out) {
  kl::check_cuda_input(x, kOp, "x", {at::kFloat});
  kl::check_like(out, x, kOp, "out", x.sizes());
  const c10::cuda::CUDAGuard guard(x.device());
  kl::check_launch(launch_sm90a_fence(kl::ptr<float>(x), kl::ptr<float>(out), x.numel(), kl::current_stream()), kOp);
}

}  // namespace

KL_LIBRARY(m) {
  m.def("sm90a_fence(Tensor x, Tensor(a!) out) -> ()", &sm90a_fence);
}
