// Host emulation of the CUDA scatter ops (src/csrc/cuda/scatter_kernels.cuh, the drivers scatter_cuda.cu runs):
// no GPU needed, not part of the library. The drivers and functors run on the CPU through host_exec.h's HostExec
// (per-thread kernels in forward, reverse or shuffled order, block kernels as fibers, workspaces of garbage whose
// unwritten bytes no kernel may read), built with -fsanitize=address,undefined (tests/kernels/test_cuda_emulation.py).
//
// For every row of the registry (reduction_table.h), int32 and int64 index, broadcast or per-batch index rows,
// index orders (shuffled, sorted, one target, runs), F = 1 (the block kernel) and F > 1 (vector and scalar
// lanes), every plan (default and tiny tunings), N == 0 and S == 0, and values with +inf, -inf, NaN, huge and
// tiny entries, it checks that
//   - the index check finds the CPU's first problem (cpu::first_problem's message, word for word), also at the
//     first and last entry, and max(index) + 1 for dim_size -1;
//   - the scatter (offsets of the index, rows read through its stable order, args mapped back) gives bitwise what
//     scatter gave on CUDA before these ops: the stable order's rows gathered into a copy and reduced by the CSR
//     kernels (run_reduce), args mapped back on the host; also along a plan (run_plan), and with the index sorted
//     (no order);
//   - the bits do not depend on the thread order;
//   - the results agree with a float64 reference within the rounding of the float accumulation (non-finite
//     results equal);
//   - a plan whose offsets or order do not fit src is found (the first bad offset, a bad position).
// --control runs the same checks with an off-by-one in the offsets the scatter reads; it must fail.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#define SEGOPS_TRACE_ACCESSES 1
#include "cpu/index_passes.h"  // cpu::first_problem: the message the CPU gives for a bad index
#include "cuda/scatter_kernels.cuh"
#include "reduction_table.h"
#include "host_exec.h"

static long g_row_checks[16] = {};
static bool g_control = false;  // --control: the scatter reads offsets with an off-by-one

// ---- problems ------------------------------------------------------------------------------------------------

// src [B, N, F] (B = lead0 * lead1), the index [rows, N] with rows 1 (broadcast) or B.
struct Problem {
  int64_t lead0 = 1, lead1 = 1, N = 0, S = 0, F = 1;
  bool broadcast = false;
  std::vector<int64_t> index;  // [rows, N]
  std::vector<float> src;      // [B, N, F]
  int64_t B() const { return lead0 * lead1; }
  int64_t rows() const { return broadcast ? 1 : B(); }
  int64_t row_of(int64_t b) const { return broadcast ? 0 : b; }
  // batch b -> the element offset of its row of a [rows, len] tensor
  BatchMap map(int64_t len) const {
    BatchMap m;
    const int64_t sizes[2] = {lead0, lead1};
    const int64_t strides[2] = {broadcast ? 0 : lead1 * len, broadcast ? 0 : len};
    for (int d = 0; d < 2; ++d) {
      if (sizes[d] == 1) continue;
      m.size[m.ndims] = sizes[d];
      m.stride[m.ndims] = strides[d];
      ++m.ndims;
    }
    return m;
  }
};

enum Kind { kShuffled, kSorted, kOneTarget, kRuns, kKinds };

float special(std::mt19937_64& rng) {
  static const float kSpecial[] = {INFINITY, -INFINITY, NAN, 1e30f, -1e30f, 1e-40f, -1e-40f, 3e29f};
  return kSpecial[rng() % (sizeof(kSpecial) / sizeof(float))];
}

// (products: no huge or tiny factors, whose overflow or underflow depends on the order)
constexpr float kNearOneSpecial[4] = {INFINITY, -INFINITY, NAN, 0.0f};

Problem make_problem(std::mt19937_64& rng, int64_t lead0, int64_t lead1, int64_t N, int64_t S, int64_t F,
                     bool broadcast, int kind, bool specials, bool near_one) {
  Problem pb;
  pb.lead0 = lead0, pb.lead1 = lead1, pb.N = N, pb.S = S, pb.F = F, pb.broadcast = broadcast;
  pb.index.resize(static_cast<size_t>(pb.rows() * N));
  std::uniform_int_distribution<int64_t> any(0, std::max<int64_t>(S - 1, 0));
  for (int64_t r = 0; r < pb.rows(); ++r) {
    int64_t* x = pb.index.data() + r * N;
    const int64_t one = any(rng);
    for (int64_t k = 0; k < N; ++k) x[k] = kind == kOneTarget ? one : any(rng);
    if (kind == kSorted || kind == kRuns) std::sort(x, x + N);
    if (kind == kRuns) {  // sorted runs, the runs in shuffled blocks of 5
      for (int64_t k = 0; k + 5 <= N; k += 10) std::swap_ranges(x + k, x + k + 5, x + std::min(N - 5, k + 5));
    }
  }
  pb.src.resize(static_cast<size_t>(pb.B() * N * F));
  std::uniform_int_distribution<int> small(-8, 8);
  std::uniform_real_distribution<float> unit(-0.25f, 0.25f);
  for (float& v : pb.src) {
    v = near_one ? 1.0f + unit(rng) : static_cast<float>(small(rng)) + unit(rng);
    if (specials && rng() % 11 == 0) v = near_one ? kNearOneSpecial[rng() % 4] : special(rng);
  }
  return pb;
}

// The stable order of every index row and its offsets, by the host (what torch's stable sort gives).
void host_order(const Problem& pb, std::vector<int64_t>& order, std::vector<int64_t>& off) {
  const int64_t n = pb.N, rows = pb.rows();
  order.resize(static_cast<size_t>(rows * n));
  off.assign(static_cast<size_t>(rows * (pb.S + 1)), 0);
  for (int64_t r = 0; r < rows; ++r) {
    int64_t* o = order.data() + r * n;
    std::iota(o, o + n, 0);
    const int64_t* x = pb.index.data() + r * n;
    std::stable_sort(o, o + n, [x](int64_t a, int64_t b) { return x[a] < x[b]; });
    int64_t* p = off.data() + r * (pb.S + 1);
    for (int64_t k = 0; k < n; ++k) ++p[x[k] + 1];
    for (int64_t t = 0; t < pb.S; ++t) p[t + 1] += p[t];
  }
}

template <typename I> std::vector<I> index_as(const Problem& pb) {
  return std::vector<I>(pb.index.begin(), pb.index.end());
}

// ---- the routes -------------------------------------------------------------------------------------------

struct Result {
  std::vector<float> out;
  std::vector<int64_t> arg;
  bool operator==(const Result& o) const {
    return out.size() == o.out.size() && arg == o.arg &&
           (out.empty() || std::memcmp(out.data(), o.out.data(), out.size() * sizeof(float)) == 0);
  }
};

template <class Op, bool kArg> struct Outputs {
  Buf<float> out;
  Buf<int64_t> arg;
  explicit Outputs(int64_t n) : out(static_cast<size_t>(n)), arg(static_cast<size_t>(kArg ? n : 0)) {}
  int64_t* arg_ptr() { return kArg ? arg.p : nullptr; }
  Result result() const {
    Result r;
    r.out.assign(out.p, out.p + out.n);
    r.arg.assign(arg.p, arg.p + arg.n);
    return r;
  }
};

Geometry geometry(const Problem& pb, int64_t* off) {
  Geometry g;
  g.B = pb.B();
  g.N = pb.N;
  g.S = pb.S;
  g.F = pb.F;
  g.indptr = off;
  g.indptr_rows = pb.rows();
  g.bmap = pb.map(pb.S + 1);
  return g;
}

// The scatter op's sequence (scatter_cuda.cu's by_index after its index check): the offsets of the index, the
// reduction reading src through the stable order (none: sorted), the args mapped back. --control: the offsets
// read with an off-by-one (every row's first offset after the first nonzero one lowered by one).
template <class Op, bool kArg, typename I>
Result new_route(const Problem& pb, const std::vector<I>& idx, const Buf<float>& src, bool sorted, int order_kind,
                 const Tuning& t) {
  HostExec ex;
  ex.order = order_kind;
  IndexRows<I> ix;
  ix.x = idx.data();
  ix.rows = pb.rows();
  ix.n = pb.N;
  ix.size = pb.S;
  std::vector<int64_t> order, host_off;
  host_order(pb, order, host_off);
  Buf<int64_t> off(static_cast<size_t>(pb.rows() * (pb.S + 1)));
  Outputs<Op, kArg> o(pb.B() * pb.S * pb.F);
  const PermLoad<float> load = perm_load(ex, src.p, sorted ? nullptr : order.data(), pb.map(pb.N), pb.B(), pb.N, pb.F);
  const Geometry g = geometry(pb, off.p);
  if (!g_control) {
    run_scatter<Op>(ex, g, off.p, ix, load, o.out.p, o.arg_ptr(), aligned_to(src.p, 16), t, 7);
  } else {
    run_index_to_indptr(ex, ix, ErrorSlot{}, off.p, 7);
    for (int64_t r = 0; r < pb.rows(); ++r) {
      for (int64_t s = 1; s <= pb.S; ++s) {
        if (off[r * (pb.S + 1) + s] > off[r * (pb.S + 1) + s - 1]) {
          --off[r * (pb.S + 1) + s];
          break;
        }
      }
    }
    run_plan<Op>(ex, g, load, o.out.p, o.arg_ptr(), aligned_to(src.p, 16), t);
  }
  return o.result();
}

// Along a plan (scatter_cuda.cu's by_plan after its check): the host's order and offsets.
template <class Op, bool kArg>
Result plan_route(const Problem& pb, const Buf<float>& src, const Tuning& t) {
  HostExec ex;
  std::vector<int64_t> order, host_off;
  host_order(pb, order, host_off);
  Buf<int64_t> off(host_off.size());
  std::copy(host_off.begin(), host_off.end(), off.p);
  Buf<int64_t> perm(order.size());
  std::copy(order.begin(), order.end(), perm.p);
  const Geometry g = geometry(pb, off.p);
  Buf<u64> words(2);
  words[0] = words[1] = kNoError;
  launch_plan_check(ex, g, perm.p, pb.rows(), words.p, 5);
  EXPECT(words[0] == kNoError && words[1] == kNoError, "a good plan was found bad");
  Outputs<Op, kArg> o(pb.B() * pb.S * pb.F);
  run_plan<Op>(ex, g, perm_load(ex, src.p, perm.p, pb.map(pb.N), pb.B(), pb.N, pb.F), o.out.p, o.arg_ptr(),
               aligned_to(src.p, 16), t);
  return o.result();
}

// What scatter did on CUDA before these ops: src's rows gathered in the stable order (a copy), the CSR kernels
// on the offsets, the args mapped back by the host (_segment.py's _original_arg).
template <class Op, bool kArg>
Result old_route(const Problem& pb, const Tuning& t) {
  HostExec ex;
  std::vector<int64_t> order, host_off;
  host_order(pb, order, host_off);
  const int64_t B = pb.B(), N = pb.N, F = pb.F;
  Buf<float> copy(static_cast<size_t>(B * N * F));
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t k = 0; k < N; ++k) {
      const int64_t from = order[pb.row_of(b) * N + k];
      std::memcpy(&copy[(b * N + k) * F], &pb.src[(b * N + from) * F], F * sizeof(float));
    }
  }
  Buf<int64_t> off(host_off.size());
  std::copy(host_off.begin(), host_off.end(), off.p);
  Outputs<Op, kArg> o(B * pb.S * F);
  // (PermLoad without an order loads the copy as SrcLoad does, load_vec: the same kernels serve both routes,
  // which halves what this file compiles; tests/kernels/test_cuda.py compares with the real CSR ops on a GPU)
  run_reduce<Op>(ex, geometry(pb, off.p), PermLoad<float>{copy.p, nullptr, nullptr, N, F}, o.out.p,
                 o.arg_ptr(), ErrorContext{}, aligned_to(copy.p, 16), t);
  Result r = o.result();
  for (int64_t e = 0; e < static_cast<int64_t>(r.arg.size()); ++e) {
    const int64_t b = e / (pb.S * F);
    if (r.arg[e] >= 0 && r.arg[e] < N) r.arg[e] = order[pb.row_of(b) * N + r.arg[e]];
  }
  return r;
}

// ---- the float64 reference -----------------------------------------------------------------------------

// Target s of batch b, feature f, its rows folded in src's order in float64; true when the result is checked
// (a name this reference knows).
bool reference(const char* name, const Problem& pb, int64_t b, int64_t s, int64_t f, double& v, int64_t& arg,
               double& tol) {
  const double eps = std::numeric_limits<float>::epsilon();
  double sum = 0, abs_sum = 0, prod = 1, best = 0;
  int64_t count = 0, at = pb.N;
  const bool is_min = std::strcmp(name, "min") == 0;
  double m = -INFINITY;
  std::vector<double> xs;
  for (int64_t k = 0; k < pb.N; ++k) {
    if (pb.index[pb.row_of(b) * pb.N + k] != s) continue;
    const double x = pb.src[(b * pb.N + k) * pb.F + f];
    xs.push_back(x);
    sum += x;
    abs_sum += std::fabs(x);
    prod *= x;
    m = std::max(m, x);
    if (at == pb.N || (!std::isnan(best) && (std::isnan(x) || (is_min ? x < best : x > best)))) {
      best = x;
      at = k;
    }
    ++count;
  }
  arg = -1;
  if (std::strcmp(name, "sum") == 0) {
    v = sum, tol = 8 * eps * abs_sum;
  } else if (std::strcmp(name, "mean") == 0) {
    v = count > 0 ? sum / count : 0, tol = 8 * eps * abs_sum / std::max<int64_t>(count, 1);
  } else if (std::strcmp(name, "mul") == 0) {
    v = prod, tol = 2 * eps * (count + 1) * std::fabs(prod) + std::numeric_limits<float>::min();
  } else if (is_min || std::strcmp(name, "max") == 0) {
    v = best, arg = at, tol = 0;
  } else if (std::strcmp(name, "logsumexp") == 0) {
    bool nan = false;
    for (double x : xs) nan |= std::isnan(x);
    if (count == 0 || nan || std::isinf(m)) {
      v = count == 0 ? 0 : nan ? NAN : m;  // (an empty target: 0, as the policy's finalize)
    } else {
      double e = 0;
      for (double x : xs) e += std::exp(x - m);
      v = m + std::log(e);
    }
    tol = 8 * eps * (1 + std::fabs(v) + std::sqrt(static_cast<double>(count)));
  } else {
    return false;
  }
  return true;
}

// ---- the checks ----------------------------------------------------------------------------------------

template <Reduce R>
void check_problem(const Problem& pb, bool with_reference, const Tuning& t, const char* what) {
  using Names = Reduction<R>;
  constexpr bool kArg = Names::kHasArg;
  visit_reducer<float>(R, [&](auto op_tag) {
    using Op = typename decltype(op_tag)::type;
    g_ctx = std::string(Names::short_name) + " " + what + " B=" + std::to_string(pb.B()) + " N=" +
            std::to_string(pb.N) + " S=" + std::to_string(pb.S) + " F=" + std::to_string(pb.F) +
            (pb.broadcast ? " broadcast" : "");
    Buf<float> src(pb.src.size());
    std::copy(pb.src.begin(), pb.src.end(), src.p);
    const Result before = old_route<Op, kArg>(pb, t);
    const std::vector<int64_t> i64 = pb.index;
    const std::vector<int32_t> i32 = index_as<int32_t>(pb);
    const Result got = new_route<Op, kArg>(pb, i64, src, false, 0, t);
    EXPECT(got == before, "the scatter differs from the gathered copy reduced by the CSR kernels");
    for (int order_kind = 1; order_kind < 3; ++order_kind) {
      EXPECT((new_route<Op, kArg>(pb, i32, src, false, order_kind, t) == got), "int32 index, thread order %d",
             order_kind);
    }
    EXPECT((plan_route<Op, kArg>(pb, src, t) == got), "along the plan");
    bool sorted = true;
    for (int64_t i = 1; i < static_cast<int64_t>(pb.index.size()); ++i) sorted &= i % pb.N == 0 || pb.index[i] >= pb.index[i - 1];
    if (sorted) EXPECT((new_route<Op, kArg>(pb, i32, src, true, 2, t) == got), "sorted index read as it is");
    if (!with_reference) return;
    for (int64_t b = 0; b < pb.B(); ++b) {
      for (int64_t s = 0; s < pb.S; ++s) {
        for (int64_t f = 0; f < pb.F; ++f) {
          double v = 0, tol = 0;
          int64_t arg = -1;
          const int64_t e = (b * pb.S + s) * pb.F + f;
          if (!reference(Names::short_name, pb, b, s, f, v, arg, tol)) {
            EXPECT(false, "no float64 reference for the registry row %s: add it", Names::short_name);
            return;
          }
          const double g = got.out[e];
          ++g_row_checks[static_cast<int>(R)];
          if (std::isfinite(v)) {
            EXPECT(std::fabs(g - v) <= tol, "target %ld feature %ld: %.9g, float64 %.9g (tolerance %.3g)",
                   static_cast<long>(s), static_cast<long>(f), g, v, tol);
          } else {
            EXPECT((std::isnan(g) && std::isnan(v)) || g == v, "target %ld: %g, float64 %g", static_cast<long>(s), g, v);
          }
          if (kArg) EXPECT(got.arg[e] == arg, "target %ld: arg %ld, float64 %ld", static_cast<long>(s),
                           static_cast<long>(got.arg[e]), static_cast<long>(arg));
        }
      }
    }
  });
}

template <Reduce R> void check_row(const Tunings& ts) {
  std::mt19937_64 rng(1234 + static_cast<int>(R));
  const bool mul = std::strcmp(Reduction<R>::short_name, "mul") == 0;
  // (lead0, lead1, N, S, F, broadcast)
  struct Shape {
    int64_t l0, l1, N, S, F;
    bool bc;
  };
  const Shape shapes[] = {{1, 1, 300, 40, 1, false}, {1, 1, 200, 7, 8, false}, {1, 1, 150, 60, 3, false},
                          {2, 3, 40, 6, 1, false},   {2, 3, 40, 6, 4, true},   {3, 1, 90, 200, 2, false},
                          {1, 1, 0, 5, 4, false},    {2, 1, 0, 3, 1, true},    {1, 1, 1, 1, 1, false},
                          // batches whose rows end inside a vector (PermLoad's walk into the next batch's row)
                          {2, 3, 37, 6, 1, false},   {2, 3, 37, 6, 1, true},   {3, 1, 45, 20, 3, false},
                          {2, 2, 29, 9, 6, true}};
  const Tuning* tunings[] = {&ts.dflt, &ts.tiny, &ts.tiny_short, &ts.tiny_merge_only};
  int i = 0;
  for (const Shape& sh : shapes) {
    for (int kind = 0; kind < kKinds; ++kind, ++i) {
      const bool specials = i % 3 == 2;
      const Problem pb = make_problem(rng, sh.l0, sh.l1, sh.N, sh.S, sh.F, sh.bc, kind, specials, mul);
      check_problem<R>(pb, true, *tunings[i % 4], specials ? "specials" : "finite");
    }
  }
  // S == 0 (an empty output): nothing to check but that nothing is read or written
  const Problem empty = make_problem(rng, 1, 1, 0, 0, 3, false, kShuffled, false, mul);
  check_problem<R>(empty, true, ts.dflt, "S == 0");
}

// The index check: the CPU's first problem (word for word), at the first and last entry too, and max + 1.
template <typename I> void check_index_problems() {
  std::mt19937_64 rng(77);
  for (int trial = 0; trial < 60; ++trial) {
    const int64_t rows = 1 + trial % 3, n = 1 + (trial * 7) % 13, size = 1 + trial % 9;
    std::vector<I> x(static_cast<size_t>(rows * n));
    for (I& v : x) v = static_cast<I>(rng() % size);
    const bool sorted = trial % 2 == 0;
    if (sorted) {
      for (int64_t r = 0; r < rows; ++r) std::sort(x.begin() + r * n, x.begin() + (r + 1) * n);
    }
    const int64_t total = rows * n, where = trial % 4 == 0 ? 0 : trial % 4 == 1 ? total - 1 : rng() % total;
    const int bad = trial % 5;  // 0: none, 1: == size, 2: -1, 3: int max, 4: a decrease (unsorted)
    if (bad == 1) x[where] = static_cast<I>(size);
    if (bad == 2) x[where] = static_cast<I>(-1);
    if (bad == 3) x[where] = std::numeric_limits<I>::max();
    if (bad == 4 && where % n != 0) x[where] = static_cast<I>(x[where - 1] - 1);
    for (int64_t use_size : {size, int64_t{-1}}) {
      g_ctx = "index check, trial " + std::to_string(trial) + " size " + std::to_string(use_size);
      HostExec ex;
      ex.order = trial % 3;
      IndexRows<I> ix;
      ix.x = x.data();
      ix.rows = rows;
      ix.n = n;
      ix.size = use_size;
      ix.check_sorted = sorted;
      Buf<u64> words(2);
      words[0] = words[1] = kNoError;
      launch_index_check(ex, ix, words.p, 3);
      const int64_t max = index_max_of_word(words[1]);
      const int64_t want_max = *std::max_element(x.begin(), x.end());
      EXPECT(max == std::max<int64_t>(want_max, -1), "max %ld, want %ld", static_cast<long>(max),
             static_cast<long>(want_max));
      if (use_size < 0 && want_max == std::numeric_limits<int64_t>::max()) continue;  // size_after_max refuses it
      const int64_t S = use_size >= 0 ? use_size : std::max<int64_t>(want_max, -1) + 1;
      const IndexProblemAt p = decode_index_problem(words[0], total);
      const std::string got = p.what < 0 ? std::string()
                                         : kPrefix + index_error_message(p.what, p.pos, n, x[p.pos],
                                                                         p.pos % n != 0 ? int64_t{x[p.pos - 1]} : 0, S);
      EXPECT(got == cpu::first_problem(x.data(), rows, n, S, sorted), "'%s' vs the CPU's '%s'", got.c_str(),
             cpu::first_problem(x.data(), rows, n, S, sorted).c_str());
    }
  }
}

// A plan that does not fit src: the first bad offset and a position outside [0, N) are found.
void check_bad_plans() {
  Problem pb;
  pb.N = 6, pb.S = 4, pb.F = 2, pb.lead0 = 2;
  const int64_t rows = 2, len = pb.S + 1;
  const std::vector<int64_t> good_off = {0, 2, 2, 5, 6, 0, 1, 3, 3, 6}, good_perm = {5, 1, 0, 2, 3, 4, 0, 1, 2, 3, 4, 5};
  for (int t = 0; t < 8; ++t) {
    g_ctx = "bad plan " + std::to_string(t);
    Buf<int64_t> off(good_off.size()), perm(good_perm.size());
    std::copy(good_off.begin(), good_off.end(), off.p);
    std::copy(good_perm.begin(), good_perm.end(), perm.p);
    int64_t want_off = -1, want_perm = -1;
    if (t == 1) off[0] = -1, want_off = 0;
    if (t == 2) off[len + 2] = 0, want_off = len + 2;              // a decrease
    if (t == 3) off[2 * len - 1] = 7, want_off = 2 * len - 1;      // past N
    if (t == 4) perm[0] = 6, want_perm = 0;
    if (t == 5) perm[11] = -1, want_perm = 11;
    if (t == 6) perm[7] = 1 << 30, perm[9] = -5, want_perm = 7;
    if (t == 7) off[3] = 1, perm[4] = 99, want_off = 3, want_perm = 4;
    HostExec ex;
    ex.order = t % 3;
    Geometry g = geometry(pb, off.p);
    g.indptr_rows = rows;
    g.bmap = pb.map(len);
    Buf<u64> words(2);
    words[0] = words[1] = kNoError;
    launch_plan_check(ex, g, perm.p, rows, words.p, 2);
    const int64_t got_off = words[0] == kNoError ? -1 : static_cast<int64_t>(words[0] >> kTagBits);
    const int64_t got_perm = words[1] == kNoError ? -1 : static_cast<int64_t>(words[1]);
    EXPECT(got_off == want_off, "first bad offset %ld, want %ld", static_cast<long>(got_off), static_cast<long>(want_off));
    EXPECT(got_perm == want_perm, "first bad position %ld, want %ld", static_cast<long>(got_perm),
           static_cast<long>(want_perm));
  }
}

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--control") == 0) {
      g_control = true;
    } else {
      std::fprintf(stderr, "usage: %s [--control]\n", argv[0]);
      return 2;
    }
  }
  const Tunings ts = make_tunings();
  for_each_reduce([&](auto r) { check_row<decltype(r)::value>(ts); });
  check_index_problems<int64_t>();
  check_index_problems<int32_t>();
  check_bad_plans();
  std::printf("scatter checks by reduction:");
  for_each_reduce([](auto r) {
    constexpr Reduce kRow = decltype(r)::value;
    std::printf(" %s %ld", Reduction<kRow>::short_name, g_row_checks[static_cast<int>(kRow)]);
  });
  std::printf("\nreads of never-written workspace bytes: %ld\n", g_uninit_reads);
  std::printf("%ld passed, %ld failed\n", g_checks - g_failures, g_failures);
  return g_failures == 0 ? 0 : 1;
}
