// Typed data pointers of a stable Tensor, for the CPU kernels and the CUDA host code. Always inlined:
// cpu/kernels.cpp is compiled once per instruction set.
#pragma once

#include <torch/csrc/stable/tensor.h>

#include "platform.h"

namespace torch_segops {

template <typename T>
SEGOPS_ALWAYS_INLINE const T* cptr(const torch::stable::Tensor& t) {
  return static_cast<const T*>(t.const_data_ptr());
}
template <typename T>
SEGOPS_ALWAYS_INLINE T* mptr(const torch::stable::Tensor& t) {
  return static_cast<T*>(t.mutable_data_ptr());
}

}  // namespace torch_segops
