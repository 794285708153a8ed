// Binding: checks the arguments, splits the rows over threads and registers the op.
#include "kernellab.h"
#include "rmsnorm.h"

#include <ATen/Parallel.h>
#include <torch/library.h>

namespace {

constexpr const char* kOp = "rmsnorm_cpu";

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

}  // namespace

KL_LIBRARY(m) {
  m.def("rmsnorm_cpu(Tensor x, Tensor weight, Tensor(a!) out, float eps=1e-6) -> ()", &rmsnorm);
}
