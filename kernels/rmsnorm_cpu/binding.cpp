// Binding: checks the arguments, splits the rows over threads and registers the op.
#include "kernellab.h"
#include "rmsnorm.h"

#include <ATen/Functions.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

namespace {

constexpr const char* kOp = "rmsnorm_cpu";
constexpr const char* kBackward = "rmsnorm_cpu_backward";

void rmsnorm(const at::Tensor& x, const at::Tensor& weight, at::Tensor& out, double eps) {
  kl::check_input(x, kOp, "x", c10::DeviceType::CPU, {at::kFloat, at::kDouble});
  kl::check_dim(x, kOp, "x", 2);
  const int64_t rows = x.size(0), cols = x.size(1);
  kl::check_like(weight, x, kOp, "weight", {cols});
  kl::check_like(out, x, kOp, "out", x.sizes());
  // A grain of rows worth ~32k elements keeps small inputs on one thread.
  const int64_t grain = std::max<int64_t>(1, 32768 / std::max<int64_t>(cols, 1));
  at::parallel_for(0, rows, grain, [&](int64_t begin, int64_t end) {
    if (x.scalar_type() == at::kFloat) {
      rmsnorm_rows(x.data_ptr<float>() + begin * cols, weight.data_ptr<float>(),
                   out.data_ptr<float>() + begin * cols, end - begin, cols, static_cast<float>(eps));
    } else {
      rmsnorm_rows(x.data_ptr<double>() + begin * cols, weight.data_ptr<double>(),
                   out.data_ptr<double>() + begin * cols, end - begin, cols, eps);
    }
  });
}

// The backward (op.toml's [backward]): grad_out and the forward's arguments and output in, the gradients of x and
// weight written. `out` is unused here (RMSNorm's backward needs x, not y) but is every backward's argument.
void rmsnorm_backward(const at::Tensor& grad_out, const at::Tensor& x, const at::Tensor& weight, const at::Tensor& out,
                      at::Tensor& grad_x, at::Tensor& grad_weight, double eps) {
  kl::check_input(grad_out, kBackward, "grad_out", c10::DeviceType::CPU, {at::kFloat, at::kDouble});
  kl::check_dim(grad_out, kBackward, "grad_out", 2);
  const int64_t rows = grad_out.size(0), cols = grad_out.size(1);
  kl::check_like(x, grad_out, kBackward, "x", {rows, cols});
  kl::check_like(weight, grad_out, kBackward, "weight", {cols});
  kl::check_like(out, grad_out, kBackward, "out", {rows, cols});
  kl::check_like(grad_x, grad_out, kBackward, "grad_x", {rows, cols});
  kl::check_like(grad_weight, grad_out, kBackward, "grad_weight", {cols});
  // The weight's gradient sums over rows: each chunk of rows adds into its own row of partials (in double), then
  // the partials are summed. A fixed number of chunks keeps the result the same for any thread count.
  const int64_t chunks = std::max<int64_t>(1, std::min<int64_t>(rows, 64));
  at::Tensor partial = at::zeros({chunks, cols}, x.options().dtype(at::kDouble));
  at::parallel_for(0, chunks, 1, [&](int64_t begin, int64_t end) {
    for (int64_t c = begin; c < end; ++c) {
      const int64_t r0 = rows * c / chunks, r1 = rows * (c + 1) / chunks;
      double* dw = partial.data_ptr<double>() + c * cols;
      if (x.scalar_type() == at::kFloat) {
        rmsnorm_backward_rows(grad_out.data_ptr<float>() + r0 * cols, x.data_ptr<float>() + r0 * cols,
                              weight.data_ptr<float>(), grad_x.data_ptr<float>() + r0 * cols, dw, r1 - r0, cols,
                              static_cast<float>(eps));
      } else {
        rmsnorm_backward_rows(grad_out.data_ptr<double>() + r0 * cols, x.data_ptr<double>() + r0 * cols,
                              weight.data_ptr<double>(), grad_x.data_ptr<double>() + r0 * cols, dw, r1 - r0, cols,
                              eps);
      }
    }
  });
  grad_weight.copy_(partial.sum(0));
}

}  // namespace

KL_LIBRARY(m) {
  m.def("rmsnorm_cpu(Tensor x, Tensor weight, Tensor(a!) out, float eps=1e-6) -> ()", &rmsnorm);
  m.def("rmsnorm_cpu_backward(Tensor grad_out, Tensor x, Tensor weight, Tensor out, Tensor(a!) grad_x, "
        "Tensor(b!) grad_weight, float eps=1e-6) -> ()", &rmsnorm_backward);
}
