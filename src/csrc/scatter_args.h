// Argument checks and the [B, N, F] view of the scatter ops (schemas in ops.cpp), shared by the CPU and CUDA
// backends (host code only).
//
// scatter_<name>(src, index, size, sorted): src viewed as [B, N, F] with dim = index.dim() - 1, index as
// [IB, N] rows whose leading dims are src's or 1 (broadcast); the output [B, size, F] (src's shape with
// size rows along dim). scatter_<name>_plan(src, perm, indptr): the same reduction along a scatter_plan
// (perm [*lead, N], the stable order of the index; indptr [*lead, size + 1], its offsets).
//
// Messages start with "torch_segops: " (the Python wrappers put the public function's name there).
#pragma once

#include <cstdint>
#include <limits>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <torch/csrc/stable/tensor.h>

#include "csr_args.h"
#include "index_args.h"
#include "torch_errors.h"

namespace torch_segops {

struct ScatterArgs {
  Tensor src;  // contiguous
  int64_t dim = 0, B = 1, N = 0, F = 1, S = 0;
  Tensor index;                       // index mode: contiguous [IB, N], int32 or int64
  Tensor perm, indptr;                // plan mode: contiguous int64 [PB, N] and [PB, S + 1]
  std::vector<int64_t> row_of_batch;  // batch b -> its row of index (or of the plan)
  int64_t rows = 0;                   // IB (or PB)
};

[[noreturn]] inline void scatter_fail(const std::string& what) { throw std::runtime_error(kPrefix + what); }

// src's leading dims against a [*lead, n] tensor's (each 1 or equal): B, N, F, and the row of each batch.
inline void view_batches(ScatterArgs& a, const Tensor& src, const Tensor& rows, const char* name) {
  if (rows.dim() < 1 || rows.dim() > src.dim()) {
    std::ostringstream os;
    os << name << " must have between 1 and src.dim() = " << src.dim() << " dims, got " << rows.dim();
    scatter_fail(os.str());
  }
  a.dim = rows.dim() - 1;
  for (int64_t d = 0; d < a.dim; ++d) {
    if (rows.size(d) != 1 && rows.size(d) != src.size(d)) {
      std::ostringstream os;
      os << name << ".size(" << d << ") = " << rows.size(d) << " does not match src.size(" << d << ") = " << src.size(d)
         << " (must be equal or 1 to broadcast)";
      scatter_fail(os.str());
    }
    a.B *= src.size(d);
  }
  a.N = src.size(a.dim);
  for (int64_t d = a.dim + 1; d < src.dim(); ++d) a.F *= src.size(d);
  a.rows = 1;
  for (int64_t d = 0; d < a.dim; ++d) a.rows *= rows.size(d);
  a.row_of_batch.resize(static_cast<size_t>(a.B));
  std::vector<int64_t> idx(static_cast<size_t>(a.dim), 0);
  for (int64_t b = 0; b < a.B; ++b) {
    int64_t row = 0;
    for (int64_t d = 0; d < a.dim; ++d) row = row * rows.size(d) + (rows.size(d) == 1 ? 0 : idx[d]);
    a.row_of_batch[b] = row;
    for (int64_t d = a.dim - 1; d >= 0; --d) {  // odometer over src's leading dims
      if (++idx[d] < src.size(d)) break;
      idx[d] = 0;
    }
  }
}

// The output's bytes, B * size * F elements of `bytes` each, refused with a message naming dim_size when
// they do not fit in int64 (a shape torch could not even describe).
inline void check_output_size(const ScatterArgs& a, int64_t size, int64_t bytes, bool with_arg) {
  const long double elems = static_cast<long double>(a.B) * static_cast<long double>(size) * static_cast<long double>(a.F);
  const long double total = elems * static_cast<long double>(bytes + (with_arg ? 8 : 0));
  if (elems > static_cast<long double>(std::numeric_limits<int64_t>::max()) ||
      total > static_cast<long double>(std::numeric_limits<int64_t>::max())) {
    std::ostringstream os;
    os << "dim_size = " << size << " is too large: the output would hold " << byte_count(static_cast<double>(elems))
       << " elements (" << byte_count(static_cast<double>(total)) << " bytes)";
    scatter_fail(os.str());
  }
}

// scatter_<name>(src, index, size, sorted): checks and the view; a.S stays -1 when size is -1.
inline ScatterArgs make_scatter_args(const Tensor& src, const Tensor& index, int64_t size, const char* op) {
  dispatch_index(index.scalar_type(), [](auto) {});
  if (index.dim() == 0) scatter_fail("index must have at least one dimension, got a 0-dim tensor");
  if (size < -1) scatter_fail("dim_size must be non-negative, got " + std::to_string(size));
  if (src.is_cuda() != index.is_cuda() || src.get_device_index() != index.get_device_index()) {
    scatter_fail("index and src must be on the same device");
  }
  ScatterArgs a;
  view_batches(a, src, index, "index");
  if (index.size(-1) != a.N) {
    std::ostringstream os;
    os << "index.size(-1) = " << index.size(-1) << " must equal src.size(" << a.dim << ") = " << a.N;
    scatter_fail(os.str());
  }
  a.src = contiguous_of(src, op, "src");
  a.index = contiguous_of(index, op, "index");
  a.S = size;
  return a;
}

// scatter_<name>_plan(src, perm, indptr): checks and the view (the offsets' values are the backend's to check).
inline ScatterArgs make_plan_args(const Tensor& src, const Tensor& perm, const Tensor& indptr, const char* op) {
  if (perm.scalar_type() != ScalarType::Long || indptr.scalar_type() != ScalarType::Long) {
    scatter_fail("plan.perm and plan.indptr must be int64 (a scatter_plan)");
  }
  if (perm.dim() != indptr.dim()) scatter_fail("plan.perm and plan.indptr must have the same number of dims");
  for (int64_t d = 0; d + 1 < perm.dim(); ++d) {
    if (perm.size(d) != indptr.size(d)) scatter_fail("plan.perm and plan.indptr must have the same leading dims");
  }
  if (indptr.size(-1) < 1) scatter_fail("plan.indptr must hold at least one offset");
  for (const Tensor* t : {&perm, &indptr}) {
    if (src.is_cuda() != t->is_cuda() || src.get_device_index() != t->get_device_index()) {
      scatter_fail("the plan and src must be on the same device");
    }
  }
  ScatterArgs a;
  view_batches(a, src, perm, "plan.perm");
  if (perm.size(-1) != a.N) {
    std::ostringstream os;
    os << "plan.perm.size(-1) = " << perm.size(-1) << " must equal src.size(" << a.dim << ") = " << a.N;
    scatter_fail(os.str());
  }
  a.src = contiguous_of(src, op, "src");
  a.perm = contiguous_of(perm, op, "plan.perm");
  a.indptr = contiguous_of(indptr, op, "plan.indptr");
  a.S = indptr.size(-1) - 1;
  return a;
}

}  // namespace torch_segops
