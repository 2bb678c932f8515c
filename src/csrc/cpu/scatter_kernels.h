// The typed CPU kernels of the scatter ops (scatter_kernels.cpp, compiled once per instruction set like
// kernels.cpp; the table of kernels.h holds them).
#pragma once

#include <cstdint>

#include <torch/csrc/stable/tensor.h>

#include "cpu/vec_math.h"  // SEGOPS_ISA_NAMESPACE_BEGIN
#include "reduction_table.h"
#include "scatter_args.h"

namespace torch_segops {
namespace cpu {

// What a scatter kernel found wrong with the index (the host words the message: index_args.h).
enum ScatterStatus : int { kScatterOk = 0, kIndexUnsorted = 1, kIndexOutOfRange = 2, kPlanOutOfRange = 3 };

SEGOPS_ISA_NAMESPACE_BEGIN

// out (and arg) [B, S, F]: the reduction r of src's rows by their index (a.index, values in [0, a.S)), each
// target's rows folded in their order in src, as segment_csr folds them on the stably sorted index (F == 1
// and not sorted: serially, row by row). sorted: an index that is not sorted is an error (kIndexUnsorted)
// instead of a longer way round.
int scatter_index_kernel(const ScatterArgs& a, Reduce r, bool sorted, const Tensor& out, const Tensor* arg);

// The same along a plan (a.perm, a.indptr; indptr checked): rows taken through perm (kPlanOutOfRange for
// a value outside [0, N)), no copy of src; F == 1 serially, as above.
int scatter_plan_kernel(const ScatterArgs& a, Reduce r, const Tensor& out, const Tensor* arg);

SEGOPS_ISA_NAMESPACE_END
}  // namespace cpu
}  // namespace torch_segops
