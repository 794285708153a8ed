// RMSNorm on the CPU, free of torch headers so that editing it recompiles in about a second.
#include "rmsnorm.h"

#include <cmath>

namespace {

template <typename T>
void rows_impl(const T* x, const T* w, T* y, int64_t rows, int64_t cols, T eps) {
  for (int64_t r = 0; r < rows; ++r) {
    const T* xr = x + r * cols;
    T* yr = y + r * cols;
    // Accumulate in double: a float sum over thousands of squares loses digits the reference keeps.
    double sum = 0.0;
    for (int64_t c = 0; c < cols; ++c) sum += static_cast<double>(xr[c]) * xr[c];
    const T scale = static_cast<T>(1.0 / std::sqrt(sum / cols + eps));
    for (int64_t c = 0; c < cols; ++c) yr[c] = xr[c] * scale * w[c];
  }
}

template <typename T>
void backward_impl(const T* dy, const T* x, const T* w, T* dx, double* dw, int64_t rows, int64_t cols, T eps) {
  for (int64_t r = 0; r < rows; ++r) {
    const T* xr = x + r * cols;
    const T* dyr = dy + r * cols;
    T* dxr = dx + r * cols;
    // Both row sums in one pass over the row, in double as in the forward.
    double squares = 0.0, dot = 0.0;
    for (int64_t c = 0; c < cols; ++c) {
      squares += static_cast<double>(xr[c]) * xr[c];
      dot += static_cast<double>(dyr[c]) * w[c] * xr[c];
    }
    const double rstd = 1.0 / std::sqrt(squares / cols + eps);
    const double k = rstd * rstd * rstd * dot / cols;
    for (int64_t c = 0; c < cols; ++c) {
      dxr[c] = static_cast<T>(rstd * dyr[c] * w[c] - k * xr[c]);
      dw[c] += static_cast<double>(dyr[c]) * xr[c] * rstd;
    }
  }
}

}  // namespace

void rmsnorm_backward_rows(const float* dy, const float* x, const float* w, float* dx, double* dw_partial,
                           int64_t rows, int64_t cols, float eps) {
  backward_impl(dy, x, w, dx, dw_partial, rows, cols, eps);
}

void rmsnorm_backward_rows(const double* dy, const double* x, const double* w, double* dx, double* dw_partial,
                           int64_t rows, int64_t cols, double eps) {
  backward_impl(dy, x, w, dx, dw_partial, rows, cols, eps);
}

void rmsnorm_rows(const float* x, const float* w, float* y, int64_t rows, int64_t cols, float eps) {
  rows_impl(x, w, y, rows, cols, eps);
}

void rmsnorm_rows(const double* x, const double* w, double* y, int64_t rows, int64_t cols, double eps) {
  rows_impl(x, w, y, rows, cols, eps);
}
