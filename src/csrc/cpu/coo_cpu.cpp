// CPU kernels of the COO index ops (schemas in ops.cpp): index_to_indptr, a sorted index to CSR offsets
// in one parallel pass that also validates it, and index_sort, the stable order of an unsorted index by
// a counting sort over its `size` targets (histogram, prefix sum, placement). The stable order is
// unique, so the permutation (and every result reduced in its order) is the same for any thread count.
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <limits>
#include <sstream>
#include <stdexcept>
#include <string>
#include <tuple>
#include <type_traits>
#include <vector>

#include <torch/csrc/stable/library.h>
#include <torch/csrc/stable/ops.h>
#include <torch/csrc/stable/tensor.h>

#include "cpu/fresh_output.h"
#include "cpu/index_passes.h"
#include "csr_args.h"
#include "index_args.h"
#include "index_math.h"
#include "op_names.h"
#include "torch_errors.h"

namespace torch_segops {
namespace {

using cpu::first_problem;
using cpu::kBlock;
using cpu::size_from_max;

// What a pass over the index found.
struct Found {
  bool unsorted = false, out_of_range = false;
};

// One parallel pass over the [rows, n] index x: flags a decrease along a row and a value outside
// [0, size), and writes the offsets a sorted row has: off[v] = i for v in (x[i - 1], x[i]] (x[-1] = -1)
// and off[v] = n for v in (x[n - 1], size]. Every offset of a row is written exactly once when the row is
// sorted and in range; otherwise some may be left unwritten (the caller then fails or recomputes).
template <typename I>
Found offsets_pass(const I* x, int64_t rows, int64_t n, int64_t size, int64_t* off) {
  const int64_t total = rows * n, len = size + 1;
  std::atomic<bool> down{false}, range{false};
  torch::stable::parallel_for(0, ceil_div(total, kBlock), 1, [&](int64_t b0, int64_t b1) {
    bool d = false, r = false;
    const int64_t i1 = std::min(total, b1 * kBlock);
    for (int64_t i = b0 * kBlock; i < i1;) {
      const int64_t row = i / n, k0 = i - row * n, end = std::min(i1, i - k0 + n);
      const I* xr = x + row * n;
      int64_t* o = off + row * len;
      int64_t prev = k0 == 0 ? -1 : std::min<int64_t>(std::max<int64_t>(xr[k0 - 1], -1), size);
      for (int64_t k = k0; k < end - row * n; ++k) {
        const int64_t v = xr[k];
        d |= k > 0 && v < xr[k - 1];
        r |= v < 0 || v >= size;
        const int64_t hi = std::min<int64_t>(std::max<int64_t>(v, -1), size);
        for (int64_t t = prev + 1; t <= hi; ++t) o[t] = k;
        prev = std::max(prev, hi);
      }
      if (end - row * n == n) {
        for (int64_t t = prev + 1; t <= size; ++t) o[t] = n;
      }
      i = end;
    }
    if (d) down.store(true);
    if (r) range.store(true);
  });
  return {down.load(), range.load()};
}

// Offsets of the rows [r0, r1) of an unsorted (in-range) index, by counting.
template <typename I>
void count_offsets(const I* x, int64_t r0, int64_t r1, int64_t n, int64_t size, int64_t* off) {
  for (int64_t r = r0; r < r1; ++r) {
    int64_t* o = off + r * (size + 1);
    std::fill(o, o + size + 1, 0);
    for (int64_t k = 0; k < n; ++k) ++o[x[r * n + k] + 1];
    for (int64_t t = 0; t < size; ++t) o[t + 1] += o[t];
  }
}

// The validating pass of both ops; returns whether the index is unsorted somewhere. Out-of-range values
// (and a decrease when check_sorted) raise the first problem.
template <typename I>
bool validate_and_offsets(const IndexView& v, const Tensor& indptr, bool check_sorted) {
  const I* x = static_cast<const I*>(v.index.const_data_ptr());
  int64_t* off = static_cast<int64_t*>(indptr.mutable_data_ptr());
  const Found f = v.n > 0 ? offsets_pass(x, v.rows, v.n, v.size, off) : Found{};
  if (v.n == 0) std::fill(off, off + v.rows * (v.size + 1), 0);
  if (f.out_of_range || (check_sorted && f.unsorted)) {
    throw std::runtime_error(first_problem(x, v.rows, v.n, v.size, check_sorted && f.unsorted));
  }
  return f.unsorted;
}

// For the index's own type I: its values x, the size (max(index) + 1 where it is -1) and a new offsets tensor
// (an allocation error names the first bad value, unsorted ones too when check_sorted); then body(x, indptr).
template <typename Body>
Tensor with_new_offsets(IndexView& v, bool check_sorted, Body body) {
  Tensor indptr;
  dispatch_index(v.index.scalar_type(), [&](auto tag) {
    using I = typename decltype(tag)::type;
    const I* x = static_cast<const I*>(v.index.const_data_ptr());
    if (v.size == -1) v.size = size_from_max(x, v.rows * v.n);
    indptr = new_offsets(v, [&] { return first_problem(x, v.rows, v.n, v.size, check_sorted); });
    body(x, indptr);
  });
  return indptr;
}

Tensor index_to_indptr_cpu(Tensor index, int64_t size, bool check_sorted) {
  IndexView v = view_of(index, size);
  return with_new_offsets(v, check_sorted, [&](const auto* x, Tensor& indptr) {
    using I = std::remove_cv_t<std::remove_pointer_t<decltype(x)>>;
    // check_sorted false: the caller promised a sorted index; one that is not still gets true counts
    if (validate_and_offsets<I>(v, indptr, check_sorted)) {
      count_offsets(x, 0, v.rows, v.n, v.size, static_cast<int64_t*>(indptr.mutable_data_ptr()));
    }
  });
}

// Stable counting sort of the rows [r0, r1) of an in-range index into perm, and their offsets into off,
// each row cut into `parts` pieces counted in parallel (hist: parts x size scratch, reused row after row;
// Count: int32_t when a row has fewer than 2^31 entries, halving the scratch the random accesses touch).
template <typename I, typename Count>
void counting_sort_rows(const I* x, int64_t r0, int64_t r1, int64_t n, int64_t size, int64_t parts, int64_t* perm,
                        int64_t* off, std::vector<Count>& hist) {
  hist.assign(static_cast<size_t>(parts * size), 0);
  const int64_t piece = ceil_div(n, parts);
  for (int64_t r = r0; r < r1; ++r) {
    const I* xr = x + r * n;
    int64_t* pr = perm + r * n;
    auto each_part = [&](const auto& body) {
      if (parts == 1) return body(int64_t{0});
      torch::stable::parallel_for(0, parts, 1, [&](int64_t p0, int64_t p1) {
        for (int64_t p = p0; p < p1; ++p) body(p);
      });
    };
    each_part([&](int64_t p) {
      Count* h = hist.data() + p * size;
      std::fill(h, h + size, 0);
      for (int64_t k = p * piece, e = std::min(n, k + piece); k < e; ++k) ++h[xr[k]];
    });
    // every part's first slot per target: all earlier targets, then the earlier parts of this target
    int64_t start = 0;
    int64_t* o = off + r * (size + 1);
    for (int64_t t = 0; t < size; ++t) {
      o[t] = start;
      for (int64_t p = 0; p < parts; ++p) {
        Count& h = hist[static_cast<size_t>(p * size + t)];
        const int64_t c = h;
        h = static_cast<Count>(start);
        start += c;
      }
    }
    o[size] = n;
    each_part([&](int64_t p) {
      Count* h = hist.data() + p * size;
      for (int64_t k = p * piece, e = std::min(n, k + piece); k < e; ++k) pr[h[xr[k]]++] = k;
    });
  }
}

std::tuple<Tensor, Tensor> index_sort_cpu(Tensor index, int64_t size) {
  IndexView v = view_of(index, size);
  Tensor perm;
  Tensor indptr = with_new_offsets(v, false, [&](const auto* x, Tensor& indptr) {
    using I = std::remove_cv_t<std::remove_pointer_t<decltype(x)>>;
    std::vector<int64_t> perm_shape = v.lead;
    if (!validate_and_offsets<I>(v, indptr, false)) {  // already sorted: no permutation
      perm_shape.push_back(0);
      perm = new_tensor(v.index, perm_shape, ScalarType::Long, "index_sort", "perm");
      return;
    }
    perm_shape.push_back(v.n);
    perm = cpu::fresh_output(new_tensor(v.index, perm_shape, ScalarType::Long, "index_sort", "perm"));
    int64_t* off = static_cast<int64_t*>(indptr.mutable_data_ptr());
    int64_t* pm = static_cast<int64_t*>(perm.mutable_data_ptr());
    const int64_t threads = std::max<int64_t>(1, torch::stable::get_num_threads());
    auto sort_with = [&](auto count_tag) {
      using Count = typename decltype(count_tag)::type;
      if (v.rows >= 2 * threads) {  // many rows: one row at a time per thread
        torch::stable::parallel_for(0, v.rows, 1, [&](int64_t r0, int64_t r1) {
          std::vector<Count> hist;
          counting_sort_rows(x, r0, r1, v.n, v.size, 1, pm, off, hist);
        });
        return;
      }
      // a few long rows: each in parts, as many as threads while the histograms stay below the index's size
      const int64_t parts = std::max<int64_t>(1, std::min(threads, v.n / std::max<int64_t>(v.size, 1)));
      std::vector<Count> hist;
      counting_sort_rows(x, 0, v.rows, v.n, v.size, parts, pm, off, hist);
    };
    if (v.n < std::numeric_limits<int32_t>::max()) {
      sort_with(TypeTag<int32_t>{});
    } else {
      sort_with(TypeTag<int64_t>{});
    }
  });
  return {perm, indptr};
}

// The row copy of gather_index, by element size (the dtypes of dispatch_dtype: 2, 4 or 8 bytes).
template <typename F>
void dispatch_bytes(int64_t bytes, const F& f) {
  if (bytes == 8) return f(TypeTag<uint64_t>{});
  if (bytes == 4) return f(TypeTag<uint32_t>{});
  return f(TypeTag<uint16_t>{});
}

// gather_coo in one pass: out[b, e, :] = src[b, index[b, e], :] for a [B, E] index (leading dims equal to
// src's), validated in the same pass (in [0, src.size(dim)); sorted along its last dim when check_sorted:
// scatter permutes src's rows with it unsorted).
Tensor gather_index_cpu(Tensor src, Tensor index, bool check_sorted) {
  const char* op = "gather_coo";
  SEGOPS_CHECK(index.dim() >= 1 && index.dim() <= src.dim(), op, "index must have between 1 and src.dim() = ",
               src.dim(), " dims, got ", index.dim());
  const int64_t dim = index.dim() - 1;
  for (int64_t d = 0; d < dim; ++d) {
    SEGOPS_CHECK(index.size(d) == src.size(d), op, "index.size(", d, ") = ", index.size(d), " must equal src.size(", d,
                 ") = ", src.size(d));
  }
  dispatch_dtype(src.scalar_type(), true, op, "src", [](auto) {});
  const IndexView v = view_of(index, src.size(dim));
  int64_t F = 1;
  for (int64_t d = dim + 1; d < src.dim(); ++d) F *= src.size(d);
  const Tensor s = contiguous_of(src, op, "src");
  const Tensor out = cpu::fresh_output(new_tensor(src, sizes_with_dim(src, dim, v.n), src.scalar_type(), op, "out"));
  const int64_t N = v.size, E = v.n, total = v.rows * E;
  std::atomic<bool> bad{false};
  dispatch_index(v.index.scalar_type(), [&](auto itag) {
    using I = typename decltype(itag)::type;
    const I* x = static_cast<const I*>(v.index.const_data_ptr());
    dispatch_bytes(dtype_bytes(src.scalar_type()), [&](auto etag) {
      using T = typename decltype(etag)::type;
      const T* sp = static_cast<const T*>(s.const_data_ptr());
      T* op_ = static_cast<T*>(out.mutable_data_ptr());
      torch::stable::parallel_for(0, ceil_div(total, kBlock), 1, [&](int64_t b0, int64_t b1) {
        bool problem = false;
        const int64_t i1 = std::min(total, b1 * kBlock);
        for (int64_t i = b0 * kBlock; i < i1;) {
          const int64_t row = i / E, k0 = i - row * E, end = std::min(i1, i - k0 + E) - row * E;
          const I* xr = x + row * E;
          const T* srow = sp + row * N * F;
          T* orow = op_ + row * E * F;
          for (int64_t k = k0; k < end; ++k) {
            const int64_t at = xr[k];
            const bool ok = at >= 0 && at < N;
            problem |= !ok || (check_sorted && k > 0 && at < xr[k - 1]);
            if (!ok) continue;
            if (F == 1) {
              orow[k] = srow[at];
            } else {
              std::copy(srow + at * F, srow + (at + 1) * F, orow + k * F);
            }
          }
          i = end + row * E;
        }
        if (problem) bad.store(true);
      });
    });
    if (bad.load()) throw std::runtime_error(first_problem(x, v.rows, E, N, check_sorted));
  });
  return out;
}

constexpr char kIndexToIndptr[] = "index_to_indptr";
constexpr char kIndexSort[] = "index_sort";
constexpr char kGatherIndex[] = "gather_index";

}  // namespace

}  // namespace torch_segops

STABLE_TORCH_LIBRARY_IMPL(torch_segops, CPU, m) {
  using namespace torch_segops;
  m.impl("index_to_indptr", TORCH_BOX((&guarded<&index_to_indptr_cpu, kIndexToIndptr>::call)));
  m.impl("index_sort", TORCH_BOX((&guarded<&index_sort_cpu, kIndexSort>::call)));
  m.impl("gather_index", TORCH_BOX((&guarded<&gather_index_cpu, kGatherIndex>::call)));
}
