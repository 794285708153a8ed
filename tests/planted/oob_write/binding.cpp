#include "kernellab_cuda.h"
#include "oob_write.h"

#include <torch/library.h>

namespace {

constexpr const char* kOp = "oob_write";

void oob_write(const at::Tensor& x, at::Tensor& out) {
  kl::check_cuda_input(x, kOp, "x", {at::kFloat});
  kl::check_like(out, x, kOp, "out", x.sizes());
  const c10::cuda::CUDAGuard guard(x.device());
  kl::check_launch(launch_oob_write(kl::ptr<float>(x), kl::ptr<float>(out), x.numel(), kl::current_stream()), kOp);
}

}  // namespace

KL_LIBRARY(m) {
  m.def("oob_write(Tensor x, Tensor(a!) out) -> ()", &oob_write);
}
