// What CUDA bindings need beyond kernellab.h: the current stream and launch-error checks.
#pragma once

#include "kernellab.h"

#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

namespace kl {

inline cudaStream_t current_stream() { return c10::cuda::getCurrentCUDAStream().stream(); }

// Launchers return cudaGetLastError() after their launch; a bad configuration surfaces here.
inline void check_launch(cudaError_t error, const char* op) {
  TORCH_CHECK(error == cudaSuccess, op, ": kernel launch failed: ", cudaGetErrorString(error));
}

inline void check_cuda_input(const at::Tensor& t, const char* op, const char* arg,
                             std::initializer_list<at::ScalarType> dtypes) {
  check_input(t, op, arg, c10::DeviceType::CUDA, dtypes);
}

template <typename T>
struct Type {
  using type = T;
};

// Calls f(Type<T>{}) with T the CUDA element type of `dtype` (float, __half or __nv_bfloat16), so a
// binding writes its launch once for the three. Other dtypes must be rejected before this.
template <typename F>
auto dispatch_float(at::ScalarType dtype, F&& f) {
  switch (dtype) {
    case at::kHalf: return f(Type<__half>{});
    case at::kBFloat16: return f(Type<__nv_bfloat16>{});
    default: return f(Type<float>{});
  }
}

// The same for ops that take only 16-bit floats (tensor-core kernels): __half or __nv_bfloat16.
template <typename F>
auto dispatch_half(at::ScalarType dtype, F&& f) {
  return dtype == at::kHalf ? f(Type<__half>{}) : f(Type<__nv_bfloat16>{});
}

// cp.async and 16-byte vector accesses need it; fresh tensors are aligned, some views are not.
inline void check_aligned16(const at::Tensor& t, const char* op, const char* arg) {
  TORCH_CHECK(reinterpret_cast<uintptr_t>(t.data_ptr()) % 16 == 0, op, ": ", arg,
              " must start at a 16-byte aligned address (pass a fresh or .clone()d tensor)");
}

inline void check_capability(const at::Tensor& t, int major, const char* op, const char* why) {
  int have = 0;
  cudaDeviceGetAttribute(&have, cudaDevAttrComputeCapabilityMajor, t.get_device());
  TORCH_CHECK(have >= major, op, ": needs compute capability ", str(major), ".0 or newer (", why, "); this GPU has ",
              str(have), ".x");
}

// Arch-specific code (sm_90a, ...) runs on exactly one compute capability; other archs compile its kernels empty.
inline void check_exact_capability(const at::Tensor& t, int major, int minor, const char* op, const char* code) {
  int have_major = 0, have_minor = 0;
  cudaDeviceGetAttribute(&have_major, cudaDevAttrComputeCapabilityMajor, t.get_device());
  cudaDeviceGetAttribute(&have_minor, cudaDevAttrComputeCapabilityMinor, t.get_device());
  TORCH_CHECK(have_major == major && have_minor == minor, op, ": runs ", code, " code, which needs compute capability ",
              str(major), ".", str(minor), " exactly; this GPU has ", str(have_major), ".", str(have_minor));
}

template <typename T>
T* ptr(const at::Tensor& t) {
  return static_cast<T*>(t.data_ptr());
}

}  // namespace kl
