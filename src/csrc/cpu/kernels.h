// The CPU kernels behind a table of typed entry points, one table per instruction set the library
// holds (kernels.cpp is compiled once per set). kernels() picks the best one this CPU runs.
#pragma once

#include <cstdint>

#include <torch/csrc/stable/tensor.h>

#include "csr_args.h"
#include "reduction_table.h"
#include "scatter_args.h"

namespace torch_segops {
namespace cpu {

// Arguments are checked and indptr validated before a kernel runs; outputs are allocated, contiguous.
struct Kernels {
  const char* isa;
  void (*segment_reduce)(const CsrArgs& a, Reduce r, const Tensor& out, const Tensor* arg);
  void (*gather)(const CsrArgs& a, int64_t R, const Tensor& out);
  void (*softmax)(const CsrArgs& a, const Tensor& out);
  void (*softmax_backward)(const CsrArgs& a, const Tensor& grad, const Tensor& grad_in);
  // scatter (cpu/scatter_kernels.h): 0, or what is wrong with the index (a ScatterStatus)
  int (*scatter)(const ScatterArgs& a, Reduce r, bool sorted, const Tensor& out, const Tensor* arg);
  int (*scatter_plan)(const ScatterArgs& a, Reduce r, const Tensor& out, const Tensor* arg);

  // every entry set (kernels.cpp sets them one by one, by name)
  constexpr bool complete() const {
    return isa && segment_reduce && gather && softmax && softmax_backward && scatter && scatter_plan;
  }
};

const Kernels& kernels_baseline();
#if defined(TORCH_SEGOPS_CPU_AVX2)
const Kernels& kernels_avx2();
#endif

// avx2 where the CPU has AVX2, FMA, F16C, BMI1/2 (x86-64-v3), else baseline. The environment variable
// TORCH_SEGOPS_CPU_ISA=baseline forces the baseline kernels (read once, at the first call).
const Kernels& kernels();

}  // namespace cpu
}  // namespace torch_segops
