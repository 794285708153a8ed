// Binding: checks the arguments and registers both versions; the kernels live in attention.cu (mma.sync)
// and attention_wgmma.cu (sm_90a).
#include "kernellab_cuda.h"
#include "attention.h"

#include <torch/library.h>

#include <limits>

namespace {

// Checks shared by both versions.
void check(const char* op, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& lengths,
           const at::Tensor& out) {
  kl::check_cuda_input(q, op, "q", {at::kHalf, at::kBFloat16});
  kl::check_dim(q, op, "q", 4);
  kl::check_like(k, q, op, "k", q.sizes());
  kl::check_like(v, q, op, "v", q.sizes());
  kl::check_input(lengths, op, "lengths", c10::DeviceType::CUDA, {at::kInt});
  TORCH_CHECK(lengths.device() == q.device(), op, ": lengths is on ", lengths.device().str(), " but q is on ",
              q.device().str());
  TORCH_CHECK(lengths.dim() == 1 && lengths.size(0) == q.size(0), op, ": lengths has shape ", kl::str(lengths.sizes()),
              " but must have shape [", kl::str(q.size(0)), "] (one valid length per batch entry)");
  kl::check_like(out, q, op, "out", q.sizes());
  const int64_t d = q.size(3);
  TORCH_CHECK(d == 64 || d == 128, op, ": head size (q's last dim) must be 64 or 128, got ", kl::str(d));
  TORCH_CHECK(q.numel() <= std::numeric_limits<int>::max(), op, ": q must have fewer than 2^31 elements");
  // One grid row per (batch, head): CUDA allows 65535.
  TORCH_CHECK(q.size(0) * q.size(1) <= 65535, op, ": batch * heads is ", kl::str(q.size(0) * q.size(1)),
              "; at most 65535 are supported");
  kl::check_aligned16(q, op, "q");
  kl::check_aligned16(k, op, "k");
  kl::check_aligned16(v, op, "v");
  kl::check_aligned16(out, op, "out");
}

void attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& lengths,
               at::Tensor& out) {
  constexpr const char* kOp = "attention";
  check(kOp, q, k, v, lengths, out);
  kl::check_capability(q, 8, kOp, "bfloat16 mma.sync and cp.async");
  const c10::cuda::CUDAGuard guard(q.device());
  kl::check_launch(kl::dispatch_half(q.scalar_type(), [&](auto type) {
    using T = typename decltype(type)::type;
    return launch_attention(kl::ptr<T>(q), kl::ptr<T>(k), kl::ptr<T>(v), lengths.data_ptr<int>(), kl::ptr<T>(out),
                            q.size(0), q.size(1), q.size(2), q.size(3), kl::current_stream());
  }), kOp);
}

void attention_wgmma(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& lengths,
                     at::Tensor& out) {
  constexpr const char* kOp = "attention_wgmma";
  check(kOp, q, k, v, lengths, out);
  kl::check_exact_capability(q, 9, 0, kOp, "sm_90a (wgmma, TMA)");
  const c10::cuda::CUDAGuard guard(q.device());
  kl::check_launch(kl::dispatch_half(q.scalar_type(), [&](auto type) {
    using T = typename decltype(type)::type;
    return launch_attention_wgmma(kl::ptr<T>(q), kl::ptr<T>(k), kl::ptr<T>(v), lengths.data_ptr<int>(),
                                  kl::ptr<T>(out), q.size(0), q.size(1), q.size(2), q.size(3), kl::current_stream());
  }), kOp);
}

}  // namespace

KL_LIBRARY(m) {
  m.def("attention(Tensor q, Tensor k, Tensor v, Tensor lengths, Tensor(a!) out) -> ()", &attention);
  m.def("attention_wgmma(Tensor q, Tensor k, Tensor v, Tensor lengths, Tensor(a!) out) -> ()", &attention_wgmma);
}
