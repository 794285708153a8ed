// Binding: checks the arguments and registers the op; the kernel lives in softmax.cu.
#include "kernellab_cuda.h"
#include "softmax.h"

#include <torch/library.h>

namespace {

constexpr const char* kOp = "softmax";
constexpr const char* kBackward = "softmax_backward";

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

// The backward (op.toml's [backward]): from the forward's output; x is every backward's argument but unused here.
void softmax_backward(const at::Tensor& grad_out, const at::Tensor& x, const at::Tensor& out, at::Tensor& grad_x) {
  kl::check_cuda_input(grad_out, kBackward, "grad_out", {at::kFloat, at::kHalf, at::kBFloat16});
  kl::check_dim(grad_out, kBackward, "grad_out", 2);
  kl::check_like(x, grad_out, kBackward, "x", grad_out.sizes());
  kl::check_like(out, grad_out, kBackward, "out", grad_out.sizes());
  kl::check_like(grad_x, grad_out, kBackward, "grad_x", grad_out.sizes());
  TORCH_CHECK(grad_out.size(0) < (int64_t(1) << 31), kBackward, ": at most 2^31 - 1 rows, got ",
              kl::str(grad_out.size(0)));
  const c10::cuda::CUDAGuard guard(grad_out.device());
  kl::check_launch(kl::dispatch_float(grad_out.scalar_type(), [&](auto type) {
    using T = typename decltype(type)::type;
    return launch_softmax_backward(kl::ptr<T>(grad_out), kl::ptr<T>(out), kl::ptr<T>(grad_x), grad_out.size(0),
                                   grad_out.size(1), kl::current_stream());
  }), kBackward);
}

}  // namespace

KL_LIBRARY(m) {
  m.def("softmax(Tensor x, Tensor(a!) out) -> ()", &softmax);
  m.def("softmax_backward(Tensor grad_out, Tensor x, Tensor out, Tensor(a!) grad_x) -> ()", &softmax_backward);
}
