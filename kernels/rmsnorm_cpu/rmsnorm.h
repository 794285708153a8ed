// The kernel's interface, included by both rmsnorm.cpp and binding.cpp so that they cannot disagree.
#pragma once

#include <cstdint>

// y[r, :] = x[r, :] / sqrt(mean(x[r, :]^2) + eps) * w, for `rows` contiguous rows of `cols`.
void rmsnorm_rows(const float* x, const float* w, float* y, int64_t rows, int64_t cols, float eps);
void rmsnorm_rows(const double* x, const double* w, double* y, int64_t rows, int64_t cols, double eps);
