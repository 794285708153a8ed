// Binding: checks the arguments and registers the op; the kernel lives in softmax.cu.
#include "kernellab_cuda.h"
#include "softmax.h"

#include <torch/library.h>

namespace {

constexpr const char* kOp = "softmax";

void softmax(const at::Tensor& x, at::Tensor& out) {
  kl::check_cuda_input(x, kOp, "x", {at::kFloat, at::kHalf, at::kBFloat16});
  kl::check_dim(x, kOp, "x", 2);
  kl::check_like(out, x, kOp, "out", x.sizes());
  TORCH_CHECK(x.size(0) < (int64_t(1) << 31), kOp, ": at most 2^31 - 1 rows, got ", kl::str(x.size(0)));
  const c10::cuda::CUDAGuard guard(x.device());
  kl::check_launch(kl::dispatch_float(x.scalar_type(), [&](auto type) {
    using T = typename decltype(type)::type;
    return launch_softmax(kl::ptr<T>(x), kl::ptr<T>(out), x.size(0), x.size(1), kl::current_stream());
  }), kOp);
}

}  // namespace

KL_LIBRARY(m) {
  m.def("softmax(Tensor x, Tensor(a!) out) -> ()", &softmax);
}
