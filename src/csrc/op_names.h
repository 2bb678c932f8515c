// The ops as the backends and their error messages name them, and the messages for an invalid indptr and
// an invalid COO index (plain values: no torch, no CUDA, so the CUDA kernels' host emulation checks them too).
#pragma once

#include <cstdint>
#include <sstream>
#include <string>

namespace torch_segops {

enum OpId : int32_t {
  kOpSegmentCsr = 0,
  kOpGatherCsr = 1,
  kOpSoftmax = 2,
  kOpSoftmaxBackward = 3,
  kOpIndexToIndptr = 4,
  kOpCount,  // the number of ops: sizes kOpNames
};

struct OpNames {
  OpId id;                 // the row's op: kOpNames[id].id == id, checked below
  const char* name;        // the public function, as error messages name it
  const char* limit_what;  // what bounds indptr[..., -1]
};
// Indexed by OpId, sized by the enum: a new op without its row leaves a row of nulls, which the static_assert
// refuses, as it refuses rows out of order.
constexpr OpNames kOpNames[kOpCount] = {
    {kOpSegmentCsr, "segment_csr", "src.size(dim)"},
    {kOpGatherCsr, "gather_csr", "size"},
    {kOpSoftmax, "segment_softmax_csr", "src.size(dim)"},
    {kOpSoftmaxBackward, "segment_softmax_csr (backward)", "out.size(dim)"},
    {kOpIndexToIndptr, "index_to_indptr", "dim_size"},
};
// Whether rows hold one row per OpId, in the enum's order (tests/cpp/reduction_registry.cpp feeds it bad tables).
constexpr bool op_rows_in_order(const OpNames (&rows)[kOpCount]) {
  for (int32_t op = 0; op < kOpCount; ++op) {
    if (rows[op].id != op || rows[op].name == nullptr || rows[op].limit_what == nullptr) return false;
  }
  return true;
}
static_assert(op_rows_in_order(kOpNames), "kOpNames needs one row per OpId, in the enum's order");

// An id that is no op (a damaged error record) is named as such, never as another op.
constexpr OpNames kNoOpNames{kOpCount, "(unknown op)", "(unknown bound)"};
inline const OpNames& op_names(int32_t op) { return op >= 0 && op < kOpCount ? kOpNames[op] : kNoOpNames; }

// The message for the invalid offset at flat position pos of a [rows, len] indptr (value: indptr[pos],
// prev: indptr[pos - 1], limit: the bound of the last offset, named limit_what), as every backend reports it.
inline std::string indptr_error_message(const char* op, const char* limit_what, int64_t pos, int64_t len,
                                        int64_t rows, int64_t value, int64_t prev, int64_t limit) {
  const int64_t row = pos / len, k = pos % len;
  const std::string at = rows > 1 ? "indptr[row " + std::to_string(row) + "][" : "indptr[";
  std::ostringstream os;
  os << "torch_segops." << op << ": ";
  if (k == 0) {
    os << "indptr must start at a non-negative offset, got " << at << "0] = " << value;
  } else if (value < prev) {
    os << "indptr must be non-decreasing, got " << at << k << "] = " << value << " < " << at << k - 1
       << "] = " << prev;
  } else {
    os << "indptr[..., -1] must be <= " << limit_what << " = " << limit << ", got " << at << k << "] = " << value;
  }
  return os.str();
}

inline std::string indptr_error_message(int32_t op, int64_t pos, int64_t len, int64_t rows, int64_t value,
                                        int64_t prev, int64_t limit) {
  return indptr_error_message(op_names(op).name, op_names(op).limit_what, pos, len, rows, value, prev, limit);
}

// The problems of a COO index, in the order the CPU reports them (the first decrease when the index must be
// sorted, else the first negative value, else the first value >= dim_size).
enum IndexProblem : int32_t { kIndexUnsorted = 0, kIndexNegative = 1, kIndexTooLarge = 2 };

// The message for the problem `what` at flat position pos of a [rows, n] index (value: index[pos], prev:
// index[pos - 1]), without the "torch_segops: " prefix.
inline std::string index_error_message(int32_t what, int64_t pos, int64_t n, int64_t value, int64_t prev,
                                       int64_t size) {
  const int64_t row = pos / n, c = pos % n;
  std::ostringstream os;
  if (what == kIndexUnsorted) {
    os << "index must be sorted (non-decreasing) along its last dim, got index[..., " << c << "] = " << value
       << " < index[..., " << c - 1 << "] = " << prev << " (in row " << row
       << " of the flattened leading dims); use scatter() for an unsorted index";
  } else if (what == kIndexNegative) {
    os << "index must be non-negative, got index[..., " << c << "] = " << value << " (row " << row << ")";
  } else {
    os << "index must be < dim_size = " << size << ", got index[..., " << c << "] = " << value << " (row " << row
       << ")";
  }
  return os.str();
}

}  // namespace torch_segops
