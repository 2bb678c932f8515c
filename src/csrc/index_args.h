// Host code of the COO index ops shared by the CPU and CUDA kernels (cpu/coo_cpu.cpp, cuda/coo_cuda.cu):
// argument checks, the [rows, n] view of index, and the offsets output with its allocation message.
// Messages start with "torch_segops: " (the Python wrappers put the public function's name there).
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <torch/csrc/stable/ops.h>
#include <torch/csrc/stable/tensor.h>

#include "csr_args.h"
#include "torch_errors.h"

namespace torch_segops {

constexpr char kPrefix[] = "torch_segops: ";

inline std::string device_name(const Tensor& t) {
  return t.is_cuda() ? "cuda:" + std::to_string(t.get_device_index()) : std::string("cpu");
}

template <typename F>
void dispatch_index(ScalarType t, const F& f) {
  if (t == ScalarType::Long) return f(TypeTag<int64_t>{});
  if (t == ScalarType::Int) return f(TypeTag<int32_t>{});
  throw std::runtime_error(std::string(kPrefix) + "index must be int64 or int32, got " + torch_dtype_name(t));
}

// dim_size -1: max(index) + 1 (0 for an empty or all-negative index, whose check then reports the value). An
// index holding the int64 maximum has no such size (max + 1 would overflow).
inline int64_t size_after_max(int64_t max) {
  if (max == std::numeric_limits<int64_t>::max()) {
    throw std::runtime_error(std::string(kPrefix) + "index must hold values below " + std::to_string(max) +
                             " (the int64 maximum) when dim_size is not given: dim_size = max(index) + 1 would "
                             "overflow int64; pass dim_size");
  }
  return std::max<int64_t>(max, -1) + 1;
}

// index viewed as [rows, n] (contiguous), the output size and the [rows, size + 1] offsets.
struct IndexView {
  Tensor index;
  int64_t rows = 0, n = 0, size = 0;
  std::vector<int64_t> lead;  // index.shape[:-1]
};

inline IndexView view_of(const Tensor& index, int64_t size) {
  if (index.dim() == 0) {
    throw std::runtime_error(std::string(kPrefix) + "index must have at least one dimension, got a 0-dim tensor");
  }
  if (size < -1) {
    throw std::runtime_error(std::string(kPrefix) + "dim_size must be non-negative, got " + std::to_string(size));
  }
  dispatch_index(index.scalar_type(), [](auto) {});
  IndexView v;
  v.index = contiguous_of(index, "index_to_indptr", "index");
  v.n = index.size(-1);
  v.lead.assign(index.sizes().begin(), index.sizes().end() - 1);
  v.rows = 1;
  for (int64_t d : v.lead) v.rows *= d;
  v.size = size;
  return v;
}

// The [*lead, size + 1] int64 offsets; an allocation failure names them as the COO functions report it,
// unless the index has a problem (problem(): its description, or ""), which is reported instead.
template <typename Problem>
Tensor new_offsets(const IndexView& v, const Problem& problem) {
  std::vector<int64_t> shape = v.lead;
  shape.push_back(v.size + 1);
  try {
    return torch::stable::new_empty(v.index, shape, ScalarType::Long);
  } catch (const std::exception& e) {
    const std::string bad = problem();
    if (!bad.empty()) throw std::runtime_error(bad);
    std::ostringstream os;
    os << kPrefix << "allocating the CSR offsets of index for dim_size = " << v.size << " (shape (" << v.rows << ", "
       << v.size + 1 << "), int64, " << byte_count(static_cast<double>(v.rows) * static_cast<double>(v.size + 1) * 8.0)
       << " bytes, on " << device_name(v.index) << ") failed";
    const std::string reason = is_dispatcher_failure(e.what()) ? torch_reason() : std::string(e.what());
    if (!reason.empty()) os << ": " << reason.substr(0, reason.find(" (originally from "));
    throw std::runtime_error(os.str());
  }
}

}  // namespace torch_segops
