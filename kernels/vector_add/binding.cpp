// Binding: checks the arguments and registers the op; the kernel lives in vector_add.cu.
#include "kernellab_cuda.h"
#include "vector_add.h"

#include <torch/library.h>

namespace {

constexpr const char* kOp = "vector_add";

void vector_add(const at::Tensor& a, const at::Tensor& b, at::Tensor& out) {
  kl::check_cuda_input(a, kOp, "a", {at::kFloat, at::kHalf, at::kBFloat16});
  kl::check_like(b, a, kOp, "b", a.sizes());
  kl::check_like(out, a, kOp, "out", a.sizes());
  const c10::cuda::CUDAGuard guard(a.device());
  kl::check_launch(kl::dispatch_float(a.scalar_type(), [&](auto type) {
    using T = typename decltype(type)::type;
    return launch_vector_add(kl::ptr<T>(a), kl::ptr<T>(b), kl::ptr<T>(out), a.numel(), kl::current_stream());
  }), kOp);
}

}  // namespace

KL_LIBRARY(m) {
  m.def("vector_add(Tensor a, Tensor b, Tensor(a!) out) -> ()", &vector_add);
}
