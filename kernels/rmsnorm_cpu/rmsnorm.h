// The kernel's interface, included by both rmsnorm.cpp and binding.cpp so that they cannot disagree.
#pragma once

#include <cstdint>

// y[r, :] = x[r, :] / sqrt(mean(x[r, :]^2) + eps) * w, for `rows` contiguous rows of `cols`.
void rmsnorm_rows(const float* x, const float* w, float* y, int64_t rows, int64_t cols, float eps);
void rmsnorm_rows(const double* x, const double* w, double* y, int64_t rows, int64_t cols, double eps);

// The backward of the same rows, y = x * r * w with r = 1 / sqrt(mean(x^2) + eps):
//   dx[c] = r * dy[c] * w[c] - x[c] * r^3 / cols * sum_c(dy[c] * w[c] * x[c])
//   dw_partial[c] += dy[c] * x[c] * r, summed over these rows (in double: the caller adds the partials).
void rmsnorm_backward_rows(const float* dy, const float* x, const float* w, float* dx, double* dw_partial,
                           int64_t rows, int64_t cols, float eps);
void rmsnorm_backward_rows(const double* dy, const double* x, const double* w, double* dx, double* dw_partial,
                           int64_t rows, int64_t cols, double eps);
