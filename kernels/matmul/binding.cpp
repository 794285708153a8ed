// Binding: checks the arguments and registers the three versions; the kernels live in the .cu files.
#include "kernellab_cuda.h"
#include "matmul.h"

#include <torch/library.h>

#include <array>
#include <limits>

namespace {

// Checks shared by both versions; returns (m, n, k).
std::array<int, 3> check(const char* op, const at::Tensor& a, const at::Tensor& b, const at::Tensor& out) {
  kl::check_cuda_input(a, op, "a", {at::kHalf, at::kBFloat16});
  kl::check_dim(a, op, "a", 2);
  kl::check_like(b, a, op, "b", b.sizes());
  kl::check_dim(b, op, "b", 2);
  TORCH_CHECK(a.size(1) == b.size(0), op, ": a is ", kl::str(a.sizes()), " and b is ", kl::str(b.sizes()),
              "; a's columns must equal b's rows");
  kl::check_like(out, a, op, "out", {a.size(0), b.size(1)});
  constexpr int64_t kMax = std::numeric_limits<int>::max();
  TORCH_CHECK(a.numel() <= kMax && b.numel() <= kMax && out.numel() <= kMax, op,
              ": each matrix must have fewer than 2^31 elements");
  return {static_cast<int>(a.size(0)), static_cast<int>(b.size(1)), static_cast<int>(a.size(1))};
}

void matmul_tiled(const at::Tensor& a, const at::Tensor& b, at::Tensor& out) {
  const std::array<int, 3> mnk = check("matmul_tiled", a, b, out);
  const int m = mnk[0], n = mnk[1], k = mnk[2];  // not a structured binding: C++17 lambdas cannot capture those
  const c10::cuda::CUDAGuard guard(a.device());
  kl::check_launch(kl::dispatch_half(a.scalar_type(), [&](auto type) {
    using T = typename decltype(type)::type;
    return launch_matmul_tiled(kl::ptr<T>(a), kl::ptr<T>(b), kl::ptr<T>(out), m, n, k, kl::current_stream());
  }), "matmul_tiled");
}

void matmul_tensorcore(const at::Tensor& a, const at::Tensor& b, at::Tensor& out) {
  const std::array<int, 3> mnk = check("matmul_tensorcore", a, b, out);
  const int m = mnk[0], n = mnk[1], k = mnk[2];
  const c10::cuda::CUDAGuard guard(a.device());
  kl::check_capability(a, 8, "matmul_tensorcore", "bfloat16 mma.sync and cp.async");
  kl::check_launch(kl::dispatch_half(a.scalar_type(), [&](auto type) {
    using T = typename decltype(type)::type;
    return launch_matmul_tensorcore(kl::ptr<T>(a), kl::ptr<T>(b), kl::ptr<T>(out), m, n, k, kl::current_stream());
  }), "matmul_tensorcore");
}

void matmul_wgmma(const at::Tensor& a, const at::Tensor& b, at::Tensor& out) {
  const std::array<int, 3> mnk = check("matmul_wgmma", a, b, out);
  const int m = mnk[0], n = mnk[1], k = mnk[2];
  const c10::cuda::CUDAGuard guard(a.device());
  kl::check_exact_capability(a, 9, 0, "matmul_wgmma", "sm_90a (wgmma, TMA)");
  kl::check_launch(kl::dispatch_half(a.scalar_type(), [&](auto type) {
    using T = typename decltype(type)::type;
    return launch_matmul_wgmma(kl::ptr<T>(a), kl::ptr<T>(b), kl::ptr<T>(out), m, n, k, kl::current_stream());
  }), "matmul_wgmma");
}

}  // namespace

KL_LIBRARY(m) {
  m.def("matmul_tiled(Tensor a, Tensor b, Tensor(a!) out) -> ()", &matmul_tiled);
  m.def("matmul_tensorcore(Tensor a, Tensor b, Tensor(a!) out) -> ()", &matmul_tensorcore);
  m.def("matmul_wgmma(Tensor a, Tensor b, Tensor(a!) out) -> ()", &matmul_wgmma);
}
