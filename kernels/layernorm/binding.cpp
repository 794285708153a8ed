// Binding: checks the arguments and registers the op; the kernel lives in layernorm.cu.
#include "kernellab_cuda.h"
#include "layernorm.h"

#include <ATen/ops/empty.h>
#include <torch/library.h>

#include <algorithm>

namespace {

constexpr const char* kOp = "layernorm";
constexpr const char* kBackward = "layernorm_backward";

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

// The backward (op.toml's [backward]): the row statistics recomputed from x; bias and out are every backward's
// arguments but unused here. A float32 workspace holds the per-block partial sums of grad_weight and grad_bias,
// or (a handful of rows) each row's mean and rstd.
void layernorm_backward(const at::Tensor& grad_out, const at::Tensor& x, const at::Tensor& weight,
                        const at::Tensor& bias, const at::Tensor& out, at::Tensor& grad_x, at::Tensor& grad_weight,
                        at::Tensor& grad_bias, double eps) {
  kl::check_cuda_input(grad_out, kBackward, "grad_out", {at::kFloat, at::kHalf, at::kBFloat16});
  kl::check_dim(grad_out, kBackward, "grad_out", 2);
  const int64_t rows = grad_out.size(0), cols = grad_out.size(1);
  kl::check_like(x, grad_out, kBackward, "x", {rows, cols});
  kl::check_like(weight, grad_out, kBackward, "weight", {cols});
  kl::check_like(bias, grad_out, kBackward, "bias", {cols});
  kl::check_like(out, grad_out, kBackward, "out", {rows, cols});
  kl::check_like(grad_x, grad_out, kBackward, "grad_x", {rows, cols});
  kl::check_like(grad_weight, grad_out, kBackward, "grad_weight", {cols});
  kl::check_like(grad_bias, grad_out, kBackward, "grad_bias", {cols});
  TORCH_CHECK(rows < (int64_t(1) << 31), kBackward, ": at most 2^31 - 1 rows, got ", kl::str(rows));
  const c10::cuda::CUDAGuard guard(grad_out.device());
  kl::check_launch(kl::dispatch_float(grad_out.scalar_type(), [&](auto type) {
    using T = typename decltype(type)::type;
    const int64_t floats = layernorm_backward_workspace(kl::ptr<T>(grad_out), kl::ptr<T>(x), kl::ptr<T>(weight),
                                                        kl::ptr<T>(grad_x), kl::ptr<T>(grad_weight),
                                                        kl::ptr<T>(grad_bias), rows, cols);
    at::Tensor workspace = at::empty({std::max<int64_t>(floats, 1)}, grad_out.options().dtype(at::kFloat));
    return launch_layernorm_backward(kl::ptr<T>(grad_out), kl::ptr<T>(x), kl::ptr<T>(weight), kl::ptr<T>(grad_x),
                                     kl::ptr<T>(grad_weight), kl::ptr<T>(grad_bias), workspace.data_ptr<float>(), rows,
                                     cols, static_cast<float>(eps), kl::current_stream());
  }), kBackward);
}

}  // namespace

KL_LIBRARY(m) {
  m.def("layernorm(Tensor x, Tensor weight, Tensor bias, Tensor(a!) out, float eps=1e-5) -> ()", &layernorm);
  m.def("layernorm_backward(Tensor grad_out, Tensor x, Tensor weight, Tensor bias, Tensor out, Tensor(a!) grad_x, "
        "Tensor(b!) grad_weight, Tensor(c!) grad_bias, float eps=1e-5) -> ()", &layernorm_backward);
}
