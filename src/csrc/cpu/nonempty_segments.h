// The CSR arguments without their empty segments, for the softmax kernels.
//
// Softmax and its backward keep one statistic per segment and feature (B x S x F values) before they
// expand it over the rows. When most segments are empty (S > N, an indptr that repeats offsets), that is
// far more than the input: 400 KB of src with 20,000 empty segments asked for 8 GB. An empty segment owns
// no row, so the expansion over the non-empty segments alone gives the same output, and there are at
// most N of them per indptr row: the statistics then never outgrow src.
#pragma once

#include <algorithm>
#include <cstdint>

#include "csr_args.h"
#include "torch_errors.h"

namespace torch_segops {
namespace cpu {

// Whether dropping the empty segments is worth it: only when some must be empty.
inline bool has_many_empty_segments(const CsrArgs& a) { return a.S > a.N; }

// `a` with the repeated offsets of every indptr row dropped (rows with fewer distinct offsets are padded
// with empty segments at their end). The offsets must have been checked (non-decreasing).
inline CsrArgs without_empty_segments(const CsrArgs& a, const char* op) {
  const int64_t len = a.S + 1, rows = a.indptr_rows;
  const int64_t* p = static_cast<const int64_t*>(a.indptr.const_data_ptr());
  int64_t kept = 1;  // distinct offsets of the row that has the most
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t* row = p + r * len;
    int64_t n = 1;
    for (int64_t k = 1; k < len; ++k) n += row[k] != row[k - 1];
    kept = std::max(kept, n);
  }
  CsrArgs c = a;
  c.S = kept - 1;
  c.indptr = new_tensor(a.indptr, {rows, kept}, ScalarType::Long, op, "the offsets of the non-empty segments");
  int64_t* q = static_cast<int64_t*>(c.indptr.mutable_data_ptr());
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t* row = p + r * len;
    int64_t* out = q + r * kept;
    int64_t n = 0;
    out[n++] = row[0];
    for (int64_t k = 1; k < len; ++k) {
      if (row[k] != row[k - 1]) out[n++] = row[k];
    }
    std::fill(out + n, out + kept, out[n - 1]);
  }
  for (int64_t& offset : c.batch_offset) offset = offset / len * kept;
  return c;
}

}  // namespace cpu
}  // namespace torch_segops
