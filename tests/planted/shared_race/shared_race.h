#pragma once

#include <cuda_runtime.h>

#include <cstdint>

constexpr int kRaceBlock = 256;

cudaError_t launch_shared_race(const float* x, float* y, int64_t n, cudaStream_t stream);
