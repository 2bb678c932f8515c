// Argument checks and the flattened [B, N, F] view shared by every backend (host code only).
//
// src is viewed as [B, N, F]: B = prod(src.shape[:dim]), N = src.size(dim), F = prod(src.shape[dim+1:]),
// with dim = indptr.dim() - 1. indptr is viewed as one row of S + 1 offsets per batch b; leading dims
// of size 1 broadcast, so several batches may share a row (batch_offset[b] says which).
#pragma once

#include <cstdint>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <torch/csrc/stable/ops.h>
#include <torch/csrc/stable/tensor.h>
#include <torch/headeronly/core/ScalarType.h>

#include "reduction_table.h"
#include "torch_errors.h"

namespace torch_segops {

using torch::headeronly::ScalarType;
using torch::stable::Tensor;

template <typename... Args>
[[noreturn]] inline void fail(const char* op, Args&&... args) {
  std::ostringstream os;
  os << "torch_segops." << op << ": ";
  (os << ... << args);
  throw std::runtime_error(os.str());
}

#define SEGOPS_CHECK(cond, op, ...) \
  do {                              \
    if (!(cond)) {                  \
      ::torch_segops::fail(op, __VA_ARGS__); \
    }                               \
  } while (0)

struct CsrArgs {
  Tensor src;     // contiguous
  Tensor indptr;  // contiguous int64, rows of S + 1 offsets
  int64_t dim = 0, B = 1, N = 0, S = 0, F = 1;
  std::vector<int64_t> batch_offset;  // element offset of batch b's row in indptr
  int64_t indptr_rows = 0;            // distinct rows held by indptr
};

// Calls f(TypeTag<scalar_t>{}) for the supported dtypes; integer dtypes only when allow_int.
template <typename F>
void dispatch_dtype(ScalarType t, bool allow_int, const char* op, const char* arg, F&& f) {
  switch (t) {
    case ScalarType::Float: return f(TypeTag<float>{});
    case ScalarType::Double: return f(TypeTag<double>{});
    case ScalarType::Half: return f(TypeTag<torch::headeronly::Half>{});
    case ScalarType::BFloat16: return f(TypeTag<torch::headeronly::BFloat16>{});
    case ScalarType::Int:
      if (allow_int) return f(TypeTag<int32_t>{});
      break;
    case ScalarType::Long:
      if (allow_int) return f(TypeTag<int64_t>{});
      break;
    default:
      break;
  }
  fail(op, arg, " has unsupported dtype ", torch_dtype_name(t),
       "; supported: torch.float16, torch.bfloat16, torch.float32, torch.float64",
       allow_int ? ", torch.int32, torch.int64" : " (integer dtypes only for " + integer_reduction_names() + " and gather)");
}

// Checks shapes, dtypes and devices (not the offsets themselves: that is backend work, see
// validate_indptr in each backend). `src` has one row per segment when rows_are_segments (gather).
inline CsrArgs make_csr_args(const Tensor& src, const Tensor& indptr, const char* op, const char* src_name = "src") {
  SEGOPS_CHECK(indptr.scalar_type() == ScalarType::Long || indptr.scalar_type() == ScalarType::Int, op,
               "indptr must be int64 or int32, got ", torch_dtype_name(indptr.scalar_type()));
  SEGOPS_CHECK(indptr.dim() >= 1, op, "indptr must have at least one dimension, got a 0-dim tensor");
  SEGOPS_CHECK(indptr.dim() <= src.dim(), op, "indptr has ", indptr.dim(), " dims but ", src_name, " only ", src.dim(),
               "; the reduction runs along dim indptr.dim() - 1 of ", src_name);
  SEGOPS_CHECK(indptr.size(-1) >= 1, op, "indptr must hold at least one offset (its last dim is empty)");
  SEGOPS_CHECK(indptr.get_device_index() == src.get_device_index() && indptr.is_cuda() == src.is_cuda(), op,
               "indptr and ", src_name, " must be on the same device");
  CsrArgs a;
  a.dim = indptr.dim() - 1;
  for (int64_t d = 0; d < a.dim; ++d) {
    SEGOPS_CHECK(indptr.size(d) == 1 || indptr.size(d) == src.size(d), op, "indptr.size(", d, ") = ", indptr.size(d),
                 " does not match ", src_name, ".size(", d, ") = ", src.size(d), " (must be equal or 1 to broadcast)");
    a.B *= src.size(d);
  }
  a.N = src.size(a.dim);
  a.S = indptr.size(-1) - 1;
  for (int64_t d = a.dim + 1; d < src.dim(); ++d) a.F *= src.size(d);
  a.src = contiguous_of(src, op, src_name);
  a.indptr = indptr.scalar_type() == ScalarType::Long ? contiguous_of(indptr, op, "indptr")
                                                      : converted(indptr, ScalarType::Long, op, "indptr");
  a.indptr_rows = a.S + 1 > 0 ? indptr.numel() / (a.S + 1) : 0;
  // Batch b -> its indptr row, honouring size-1 (broadcast) leading dims of indptr.
  a.batch_offset.resize(static_cast<size_t>(a.B));
  std::vector<int64_t> idx(static_cast<size_t>(a.dim), 0);
  for (int64_t b = 0; b < a.B; ++b) {
    int64_t row = 0;
    for (int64_t d = 0; d < a.dim; ++d) row = row * indptr.size(d) + (indptr.size(d) == 1 ? 0 : idx[d]);
    a.batch_offset[b] = row * (a.S + 1);
    for (int64_t d = a.dim - 1; d >= 0; --d) {  // odometer over src's leading dims
      if (++idx[d] < src.size(d)) break;
      idx[d] = 0;
    }
  }
  return a;
}

// src's shape with the reduced dim replaced by `n`.
inline std::vector<int64_t> sizes_with_dim(const Tensor& t, int64_t dim, int64_t n) {
  std::vector<int64_t> s(t.sizes().begin(), t.sizes().end());
  s[dim] = n;
  return s;
}

// An output of the given sizes and dtype on src's device: `given` (the out= variants write into the
// caller's tensor, which must match exactly and be contiguous) or a new tensor.
inline Tensor output_for(const Tensor& src, const std::vector<int64_t>& sizes, ScalarType dtype,
                         const Tensor* given, const char* op, const char* name) {
  if (given == nullptr) return new_tensor(src, sizes, dtype, op, name);
  const Tensor& t = *given;
  SEGOPS_CHECK(t.is_cuda() == src.is_cuda() && t.get_device_index() == src.get_device_index(), op, name,
               " must be on the same device as src");
  SEGOPS_CHECK(t.scalar_type() == dtype, op, name, " has dtype ", torch_dtype_name(t.scalar_type()), ", expected ",
               torch_dtype_name(dtype));
  bool same = static_cast<size_t>(t.dim()) == sizes.size();
  for (size_t d = 0; same && d < sizes.size(); ++d) same = t.size(static_cast<int64_t>(d)) == sizes[d];
  auto shape = [](const std::vector<int64_t>& v) {
    std::ostringstream os;
    for (size_t d = 0; d < v.size(); ++d) os << (d ? ", " : "[") << v[d];
    os << (v.empty() ? "[]" : "]");
    return os.str();
  };
  SEGOPS_CHECK(same, op, name, " has shape ", shape(sizes_of(t)), ", expected ", shape(sizes));
  SEGOPS_CHECK(t.is_contiguous(), op, name, " must be contiguous");
  return t;
}

}  // namespace torch_segops
