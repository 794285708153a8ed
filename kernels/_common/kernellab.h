// Argument checks shared by the bindings (.cpp): one clear sentence per mistake, raised as a
// Python RuntimeError. Check in argument order, device first, so the first mistake is the one named.
//
// Numbers in messages go through kl::str, never through std::ostream: with torch 2.11 wheels and
// the H100 image's g++, an extension's own ostream integer formatting crashed the process (SIGSEGV
// in num_put, seen 2026-11-22) exactly when a check failed. std::to_string does not touch locales.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/util/Exception.h>
#include <torch/library.h>

#include <initializer_list>
#include <string>

// Register the op's schema and kernels under its own namespace, torch.ops.<TORCH_EXTENSION_NAME>:
//     KL_LIBRARY(m) { m.def("myop(Tensor x, Tensor(a!) out) -> ()", &myop); }
// Not TORCH_LIBRARY(TORCH_EXTENSION_NAME, m): up to torch 2.6 that macro uses its argument unexpanded, so
// every op registered the namespace "TORCH_EXTENSION_NAME" and a second op's library aborted the process
// when it loaded (found building with Debian's CUDA 12.4 and torch 2.6.0). One more macro level expands it.
#define KL_LIBRARY_IN(ns, m) TORCH_LIBRARY(ns, m)
#define KL_LIBRARY(m) KL_LIBRARY_IN(TORCH_EXTENSION_NAME, m)

namespace kl {

inline std::string str(int64_t value) { return std::to_string(value); }

inline std::string str(c10::IntArrayRef shape) {
  std::string text = "[";
  for (size_t i = 0; i < shape.size(); ++i) text += (i ? ", " : "") + std::to_string(shape[i]);
  return text + "]";
}

inline void check_device(const at::Tensor& t, const char* op, const char* arg, c10::DeviceType want) {
  TORCH_CHECK(t.device().type() == want, op, ": ", arg, " must be on a ",
              want == c10::DeviceType::CUDA ? "CUDA" : "CPU", " device, got ", t.device().str());
}

inline void check_contiguous(const at::Tensor& t, const char* op, const char* arg) {
  TORCH_CHECK(t.is_contiguous(), op, ": ", arg, " must be contiguous (call .contiguous() on it first)");
}

inline void check_dtype(const at::Tensor& t, const char* op, const char* arg,
                        std::initializer_list<at::ScalarType> allowed) {
  for (auto s : allowed) {
    if (t.scalar_type() == s) return;
  }
  std::string names;
  for (auto s : allowed) names += (names.empty() ? "" : ", ") + std::string(c10::toString(s));
  TORCH_CHECK(false, op, ": ", arg, " has dtype ", c10::toString(t.scalar_type()), "; expected one of ", names);
}

inline void check_dim(const at::Tensor& t, const char* op, const char* arg, int64_t dims) {
  TORCH_CHECK(t.dim() == dims, op, ": ", arg, " must have ", str(dims), " dimensions, got shape ", str(t.sizes()));
}

// `t` must have the same device and dtype as `like`, and the given shape.
inline void check_like(const at::Tensor& t, const at::Tensor& like, const char* op, const char* arg,
                       c10::IntArrayRef shape) {
  check_device(t, op, arg, like.device().type());
  TORCH_CHECK(t.device() == like.device(), op, ": ", arg, " is on ", t.device().str(), " but the input is on ",
              like.device().str());
  TORCH_CHECK(t.scalar_type() == like.scalar_type(), op, ": ", arg, " has dtype ", c10::toString(t.scalar_type()),
              " but the input has dtype ", c10::toString(like.scalar_type()), "; they must match");
  TORCH_CHECK(t.sizes() == shape, op, ": ", arg, " has shape ", str(t.sizes()), " but must have shape ", str(shape));
  check_contiguous(t, op, arg);
}

// The usual first input: on `device`, contiguous, one of `dtypes`.
inline void check_input(const at::Tensor& t, const char* op, const char* arg, c10::DeviceType device,
                        std::initializer_list<at::ScalarType> dtypes) {
  check_device(t, op, arg, device);
  check_dtype(t, op, arg, dtypes);
  check_contiguous(t, op, arg);
}

}  // namespace kl
