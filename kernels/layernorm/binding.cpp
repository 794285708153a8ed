// Binding: checks the arguments and registers the op; the kernel lives in layernorm.cu.
#include "kernellab_cuda.h"
#include "layernorm.h"

#include <torch/library.h>

namespace {

constexpr const char* kOp = "layernorm";

void layernorm(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias, at::Tensor& out, double eps) {
  kl::check_cuda_input(x, kOp, "x", {at::kFloat, at::kHalf, at::kBFloat16});
  kl::check_dim(x, kOp, "x", 2);
  kl::check_like(weight, x, kOp, "weight", {x.size(1)});
  kl::check_like(bias, x, kOp, "bias", {x.size(1)});
  kl::check_like(out, x, kOp, "out", x.sizes());
  TORCH_CHECK(x.size(0) < (int64_t(1) << 31), kOp, ": at most 2^31 - 1 rows, got ", kl::str(x.size(0)));
  const c10::cuda::CUDAGuard guard(x.device());
  kl::check_launch(kl::dispatch_float(x.scalar_type(), [&](auto type) {
    using T = typename decltype(type)::type;
    return launch_layernorm(kl::ptr<T>(x), kl::ptr<T>(weight), kl::ptr<T>(bias), kl::ptr<T>(out), x.size(0),
                            x.size(1), static_cast<float>(eps), kl::current_stream());
  }), kOp);
}

}  // namespace

KL_LIBRARY(m) {
  m.def("layernorm(Tensor x, Tensor weight, Tensor bias, Tensor(a!) out, float eps=1e-5) -> ()", &layernorm);
}
