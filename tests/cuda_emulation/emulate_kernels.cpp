// Host emulation test of the CUDA kernels (no GPU needed). Not part of the library.
//
// Runs the real functors and drivers of src/csrc/cuda/ (drivers.cuh) on the CPU, through an Exec that stands in
// for CudaCall: workspaces and shared memory filled with garbage; per-thread kernels thread by thread in
// forward, reverse or shuffled order; block kernels block by block, each thread a fiber run phase by
// phase between barriers and shuffles, in forward, reverse or shuffled order inside a phase
// (block_emulation.h, which aborts on a barrier or shuffle not every thread reaches). It checks, for
// every op, dtype path (F == 1 block kernel / short-segment kernel / merge-path vector lanes / scalar
// lanes, aligned or not) and plan (default tuning, tiny chunks that force deep carry levels, tiny groups
// of the short-segment kernel on every F > 1 input):
//   - results equal a naive sequential reference (bitwise for sum/mean/min/max/gather/backward on
//     integer-valued data, and for mul on factors whose products are exact in any order; within tolerance
//     for logsumexp/softmax; softmax also at offsets of 1e7, and
//     6e4 for float16, against a float64 reference);
//   - results are bitwise identical whatever order the threads run in;
//   - invalid indptr never reads or writes out of bounds (built with -fsanitize=address,undefined,
//     including alignment of the vector loads) and is reported with the CPU's first bad position;
//   - the error messages (error_messages.h): the CPU's indptr messages, and "no kernel image" naming the
//     GPU's compute capability, the library's architectures and the fix.
// Build and run: tests/packaging/test_cuda_build.py (g++ -std=c++17 -fsanitize=address,undefined ...).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

// Every global access of the kernels goes through the trace hooks (segops_trace_access below): the emulation
// checks that no kernel reads workspace bytes that were never written (what compute-sanitizer's initcheck
// checks on a GPU).
#define SEGOPS_TRACE_ACCESSES 1
#include "cuda/call_errors.cuh"
#include "cuda/coo_kernels.cuh"
#include "cuda/drivers.cuh"
#include "cuda/error_messages.h"
#include "reduction_table.h"
#include "block_emulation.h"

using namespace torch_segops;
using namespace torch_segops::cuda;
using Half = torch::headeronly::Half;
using BF16 = torch::headeronly::BFloat16;

#include "host_exec.h"

static long g_reference_checks = 0;

// ---- test problems ---------------------------------------------------------------------------------

struct Problem {
  std::string name;
  std::vector<int64_t> lead;      // src leading dims
  std::vector<int64_t> ind_lead;  // indptr leading dims (equal or 1)
  int64_t N = 0, S = 0, F = 1;
  std::vector<int64_t> indptr;    // contiguous [prod(ind_lead), S + 1]
  int64_t B() const {
    int64_t b = 1;
    for (int64_t d : lead) b *= d;
    return b;
  }
  int64_t rows() const {
    int64_t r = 1;
    for (int64_t d : ind_lead) r *= d;
    return r;
  }
  // host reference: element offset of batch b's indptr row
  int64_t row_offset(int64_t b) const {
    int64_t off = 0, mul = S + 1;
    for (int64_t d = static_cast<int64_t>(lead.size()) - 1; d >= 0; --d) {
      const int64_t i = b % lead[d];
      b /= lead[d];
      if (ind_lead[d] != 1) off += i * mul;
      mul *= ind_lead[d];
    }
    return off;
  }
  BatchMap bmap() const {
    BatchMap m;
    m.ndims = static_cast<int>(lead.size());
    int64_t mul = S + 1;
    for (int64_t d = m.ndims - 1; d >= 0; --d) {
      m.size[d] = lead[d];
      m.stride[d] = ind_lead[d] == 1 ? 0 : mul;
      mul *= ind_lead[d];
    }
    return m;
  }
  Geometry geometry(const int64_t* ip) const {
    Geometry g;
    g.B = B();
    g.N = N;
    g.S = S;
    g.F = F;
    g.indptr = ip;
    g.indptr_rows = rows();
    g.bmap = bmap();
    return g;
  }
};

// One indptr row of S + 1 offsets inside [lo_bound, hi_bound] with the given length distribution.
std::vector<int64_t> make_row(std::mt19937_64& rng, int64_t N, int64_t S, int kind) {
  std::vector<int64_t> p(static_cast<size_t>(S + 1));
  std::uniform_int_distribution<int64_t> any(0, N);
  int64_t start = 0, stop = N;
  if (kind % 2 == 1 && N > 2) {  // rows outside [indptr[0], indptr[S]) exist
    start = any(rng) / 3;
    stop = N - any(rng) / 3;
    if (stop < start) std::swap(start, stop);
  }
  const int64_t span = stop - start;
  if (S == 0) {
    p[0] = start;
    return p;
  }
  std::vector<int64_t> len(static_cast<size_t>(S), 0);
  switch (kind / 2) {
    case 0: {  // uniform cut points (some empty segments)
      std::uniform_int_distribution<int64_t> cut(0, span);
      std::vector<int64_t> cuts(static_cast<size_t>(S - 1));
      for (auto& c : cuts) c = cut(rng);
      std::sort(cuts.begin(), cuts.end());
      p[0] = start;
      for (int64_t s = 1; s < S; ++s) p[s] = start + cuts[s - 1];
      p[S] = stop;
      return p;
    }
    case 1: {  // power law: lengths ~ 1 / u^1.5
      std::uniform_real_distribution<double> u(0.02, 1.0);
      double tot = 0;
      std::vector<double> w(static_cast<size_t>(S));
      for (auto& x : w) tot += (x = std::pow(u(rng), -1.5) - 1.0);
      int64_t acc = 0;
      for (int64_t s = 0; s < S; ++s) {
        len[s] = tot > 0 ? static_cast<int64_t>(w[s] / tot * span) : 0;
        acc += len[s];
      }
      len[S - 1] += span - acc;
      break;
    }
    case 2: {  // a few huge segments, the rest tiny or empty
      std::uniform_int_distribution<int64_t> pick(0, S - 1);
      int64_t left = span;
      for (int h = 0; h < 2 && left > 0; ++h) {
        const int64_t n = left * 2 / 5;
        len[pick(rng)] += n;
        left -= n;
      }
      for (int64_t s = 0; s < S && left > 0; ++s) {
        const int64_t n = std::min<int64_t>(left, rng() % 3);
        len[s] += n;
        left -= n;
      }
      len[pick(rng)] += left;
      break;
    }
    default: {  // everything in one segment in the middle
      len[S / 2] = span;
      break;
    }
  }
  p[0] = start;
  for (int64_t s = 0; s < S; ++s) p[s + 1] = p[s] + len[s];
  return p;
}

Problem make_problem(std::mt19937_64& rng, std::vector<int64_t> lead, std::vector<int64_t> ind_lead, int64_t N,
                     int64_t S, int64_t F, int kind) {
  Problem pb;
  pb.lead = std::move(lead);
  pb.ind_lead = std::move(ind_lead);
  pb.N = N;
  pb.S = S;
  pb.F = F;
  for (int64_t r = 0; r < pb.rows(); ++r) {
    const auto row = make_row(rng, N, S, kind);
    pb.indptr.insert(pb.indptr.end(), row.begin(), row.end());
  }
  pb.name = "B" + std::to_string(pb.B()) + " rows" + std::to_string(pb.rows()) + " N" + std::to_string(N) + " S" +
            std::to_string(S) + " F" + std::to_string(F) + " kind" + std::to_string(kind);
  return pb;
}

// ---- value helpers -----------------------------------------------------------------------------------

template <typename T> double as_double(T x) { return static_cast<double>(static_cast<acc_t<T>>(x)); }
template <typename T> bool same_value(T a, T b) {
  const double x = as_double(a), y = as_double(b);
  return (std::isnan(x) && std::isnan(y)) || std::memcmp(&a, &b, sizeof(T)) == 0 || (x == y && x != 0.0);
}
template <typename T> bool close_value(T a, T b, double rtol) {
  const double x = as_double(a), y = as_double(b);
  if (std::isnan(x) || std::isnan(y)) return std::isnan(x) && std::isnan(y);
  if (std::isinf(x) || std::isinf(y)) return x == y;
  return std::fabs(x - y) <= rtol * std::max(1.0, std::fabs(y));
}
template <typename T> double tol_for() {
  if constexpr (std::is_same_v<T, double>) return 1e-12;
  if constexpr (std::is_same_v<T, float>) return 2e-5;
  return 1e-2;  // half / bfloat16 outputs
}

// The special values every reduction is drawn with (item 4 of issue #37): +inf, -inf, NaN, and huge and tiny
// finite values of either sign. Huge: no sum of a test segment (at most a few thousand rows) overflows the
// accumulation type (half: its 4096s can overflow the output, as on the CPU); tiny: subnormal in T. Integers:
// huge only (no sum of them overflows int64: no undefined behaviour to hide).
template <typename T> struct Specials {
  static constexpr bool kFloat = std::is_floating_point_v<acc_t<T>>;
  static double huge() {
    if constexpr (std::is_same_v<T, double>) return std::ldexp(1.0, 1000);
    if constexpr (std::is_same_v<T, Half>) return 4096.0;
    if constexpr (std::is_same_v<T, int32_t>) return std::ldexp(1.0, 20);
    if constexpr (std::is_same_v<T, int64_t>) return std::ldexp(1.0, 40);
    return std::ldexp(1.0, 100);  // float, bfloat16
  }
  static double tiny() {
    if constexpr (std::is_same_v<T, double>) return std::ldexp(1.0, -1060);
    if constexpr (std::is_same_v<T, Half>) return std::ldexp(1.0, -20);
    if constexpr (std::is_same_v<T, BF16>) return std::ldexp(1.0, -130);
    return std::ldexp(1.0, -140);  // float
  }
  // Factors of the product: 2^k, 2^-k with no product of a few of them leaving the accumulation type.
  static double huge_factor() {
    if constexpr (std::is_same_v<T, double>) return std::ldexp(1.0, 300);
    if constexpr (std::is_same_v<T, Half>) return 64.0;
    return std::ldexp(1.0, 40);
  }
};

// Integer values in [-8, 8] (sums exact in any order); with specials, about one value in 16 is one of the
// special values of T instead.
template <typename T> Buf<T> make_data(std::mt19937_64& rng, size_t n, bool misalign, bool specials) {
  Buf<T> b(n, misalign);
  std::uniform_int_distribution<int> v(-8, 8), pick(0, 15 * 8 + 7);
  const double inf = std::numeric_limits<double>::infinity();
  const double kinds[] = {inf, -inf, std::numeric_limits<double>::quiet_NaN(), Specials<T>::huge(),
                          -Specials<T>::huge(), Specials<T>::kFloat ? Specials<T>::tiny() : 3.0,
                          Specials<T>::kFloat ? -Specials<T>::tiny() : -3.0, Specials<T>::huge()};
  for (size_t i = 0; i < n; ++i) {
    double x = v(rng);
    const int k = pick(rng);
    if (specials && k < 8 && (Specials<T>::kFloat || k >= 3)) x = kinds[k];
    b[i] = static_cast<T>(static_cast<acc_t<T>>(x));
  }
  return b;
}

// Factors for products: -1, 1, 0, 2 and 0.5 (integers: 0), so that a product is exact in any order (its
// exponent a random walk far from the float range's ends), also with zeros (signed: the sign of a product
// does not depend on the order either); with specials, also +inf, -inf, NaN and 2^k, 2^-k (Specials).
template <typename T> Buf<T> make_factors(std::mt19937_64& rng, size_t n, bool misalign, bool specials) {
  Buf<T> b(n, misalign);
  const double inf = std::numeric_limits<double>::infinity(), h = Specials<T>::huge_factor();
  const double kPick[] = {-1, 1, 1, -1, 1, 0, 2, 0.5, inf, -inf, std::numeric_limits<double>::quiet_NaN(), h, 1 / h,
                          -h};
  std::uniform_int_distribution<int> v(0, 7), rare(0, 63), special(8, 13);
  for (size_t i = 0; i < n; ++i) {
    int k = v(rng);
    if (specials && rare(rng) == 0) k = special(rng);
    if (!Specials<T>::kFloat && k >= 8 && k <= 10) k = 1;
    b[i] = static_cast<T>(static_cast<acc_t<T>>(kPick[k]));
  }
  return b;
}
template <class Op> constexpr bool kIsProduct = false;
template <typename A> constexpr bool kIsProduct<ProdOp<A>> = true;

// ---- the reference of each reduction, with the CPU kernels' rules for NaN and infinities ---------------------
// Reference<Op>::check(xs, rows, count, N, got, arg, why): xs the segment's values (in long double, in row
// order; rows their positions), got / arg the kernel's result; false with the reason when they disagree. One
// rule per reducer of the registry (reduction_table.h): a reduction without one does not compile here.

template <typename T> long double max_finite() { return static_cast<long double>(std::numeric_limits<acc_t<T>>::max()); }
template <> long double max_finite<Half>() { return 65504.0L; }
template <> long double max_finite<BF16>() { return static_cast<long double>(std::ldexp(255.0 / 128, 127)); }
template <typename T> double eps_of() {
  if constexpr (std::is_same_v<T, Half>) return std::ldexp(1.0, -10);
  if constexpr (std::is_same_v<T, BF16>) return std::ldexp(1.0, -7);
  if constexpr (std::is_floating_point_v<T>) return std::numeric_limits<T>::epsilon();
  return 0.0;
}

// got against the exact value r (long double): equal after rounding to T when exact, else within tol of it
// (NaN and infinities must match; a value at the edge of T's range may round to its largest or to inf).
template <typename T> bool matches(T got, long double r, bool exact, long double tol) {
  using A = acc_t<T>;
  const T want = static_cast<T>(static_cast<A>(r));
  if (std::isnan(r)) return std::isnan(as_double(got));
  if (exact) return same_value(got, want);
  const long double g = as_double(got);
  if (std::isinf(g) || std::isinf(as_double(want))) {
    if (g == as_double(want)) return true;
    return !std::isnan(g) && std::signbit(g) == std::signbit(r) && std::fabs(r) >= max_finite<T>() * (1 - 4 * eps_of<T>());
  }
  return std::fabs(g - r) <= tol;
}

template <class> constexpr bool kHasNoReference = true;
template <class Op> struct Reference {  // a row of the registry whose reducer has no rule below
  static_assert(!kHasNoReference<Op>, "emulate_kernels.cpp: add Reference<the row's reducer>: its CUDA kernels are "
                                      "checked against it (docs/design.md, \"Adding a reduction\")");
};

template <typename A> struct Reference<SumOp<A>> {
  template <typename T> static bool check(const std::vector<long double>& xs, const std::vector<int64_t>&, int64_t count,
                                          int64_t, T got, int64_t, std::string& why, bool mean = false) {
    long double s = 0, mag = 0;
    bool exact = true;
    for (long double x : xs) {
      s += x;
      if (std::isfinite(x)) mag += std::fabs(x);
      exact &= !std::isfinite(x) || (x == std::floor(x) && std::fabs(x) <= 8);
    }
    if (!std::is_floating_point_v<A>) exact = true;  // integer sums: exact
    long double r = count > 0 && mean ? s / count : s;
    if (mean && exact && std::isfinite(s) && count > 0) r = static_cast<A>(static_cast<A>(s) / static_cast<A>(count));
    const long double tol = (count + 2) * eps_of<A>() * mag / (mean && count > 0 ? count : 1) +
                            2 * eps_of<T>() * std::fabs(r) + static_cast<long double>(Specials<T>::tiny()) * 4;
    const bool ok = matches(got, r, exact, tol);
    if (!ok) why = "expected " + std::to_string(static_cast<double>(r)) + (exact ? " exactly" : " within tolerance");
    return ok;
  }
};

template <typename A> struct Reference<MeanOp<A>> {
  template <typename T> static bool check(const std::vector<long double>& xs, const std::vector<int64_t>& rows,
                                          int64_t count, int64_t N, T got, int64_t arg, std::string& why) {
    return Reference<SumOp<A>>::check(xs, rows, count, N, got, arg, why, true);
  }
};

// The exact product; checked where every order's partial products stay inside A's range (the exponents of
// the factors' powers of two summed over the positive and over the negative ones), else only a NaN.
template <typename A> struct Reference<ProdOp<A>> {
  template <typename T> static bool check(const std::vector<long double>& xs, const std::vector<int64_t>&, int64_t,
                                          int64_t, T got, int64_t, std::string& why) {
    if constexpr (std::is_integral_v<A>) {
      using U = std::make_unsigned_t<A>;
      U p = 1;
      for (long double x : xs) p = static_cast<U>(p * static_cast<U>(static_cast<A>(x)));
      const bool ok = same_value(got, static_cast<T>(static_cast<A>(p)));
      if (!ok) why = "integer product (wrapping)";
      return ok;
    } else {
      long double p = 1;
      int up = 0, down = 0;
      bool zero = false, inf = false, nan = false;
      for (long double x : xs) {
        p *= x;
        nan |= std::isnan(x);
        zero |= x == 0;
        inf |= std::isinf(x);
        if (std::isfinite(x) && x != 0) {
          const int e = std::ilogb(x);
          (e > 0 ? up : down) += e;
        }
      }
      if (nan || (zero && inf)) {
        if (!std::isnan(as_double(got))) why = "expected NaN";
        return std::isnan(as_double(got));
      }
      const bool in_range = up < std::numeric_limits<A>::max_exponent - 1 &&
                            down > std::numeric_limits<A>::min_exponent - std::numeric_limits<A>::digits;
      if (!in_range) return true;  // over- or underflows in some orders
      const bool ok = matches(got, p, true, 0);
      if (!ok) why = "expected " + std::to_string(static_cast<double>(p));
      return ok;
    }
  }
};

// The first NaN (with its position) if there is one, else the smallest (largest) value at its first position.
template <typename A, bool kIsMax> struct Reference<ArgExtremumOp<A, kIsMax>> {
  template <typename T> static bool check(const std::vector<long double>& xs, const std::vector<int64_t>& rows,
                                          int64_t count, int64_t N, T got, int64_t arg, std::string& why) {
    if (count == 0) {
      const bool ok = same_value(got, T(0)) && arg == N;
      if (!ok) why = "empty segment: 0 and arg N";
      return ok;
    }
    size_t best = 0;
    for (size_t i = 0; i < xs.size(); ++i) {
      if (std::isnan(xs[best])) break;
      if (std::isnan(xs[i]) || (kIsMax ? xs[i] > xs[best] : xs[i] < xs[best])) best = i;
    }
    const bool ok = matches(got, xs[best], true, 0) && arg == rows[best];
    if (!ok) why = "expected " + std::to_string(static_cast<double>(xs[best])) + " at " + std::to_string(rows[best]);
    return ok;
  }
};

// NaN if a value is NaN, +inf if one is +inf, -inf if all are -inf, 0 for an empty segment; else
// m + log(sum(exp(x - m))) in long double.
template <typename A> struct Reference<LogSumExpOp<A>> {
  template <typename T> static bool check(const std::vector<long double>& xs, const std::vector<int64_t>&, int64_t count,
                                          int64_t, T got, int64_t, std::string& why) {
    long double m = -std::numeric_limits<long double>::infinity(), r = 0;
    bool nan = false;
    for (long double x : xs) {
      nan |= std::isnan(x);
      if (!std::isnan(x)) m = std::max(m, x);
    }
    if (count == 0) {
      r = 0;
    } else if (nan) {
      r = std::numeric_limits<long double>::quiet_NaN();
    } else if (std::isinf(m)) {
      r = m;
    } else {
      long double s = 0;
      for (long double x : xs) s += std::exp(x - m);
      r = m + std::log(s);
    }
    const long double tol = tol_for<T>() * std::max<long double>(1, std::fabs(r));
    const bool ok = std::isinf(r) ? as_double(got) == r : matches(got, r, false, tol);
    if (!ok) why = "expected " + std::to_string(static_cast<double>(r));
    return ok;
  }
};

template <typename X> bool bitwise_equal(const Buf<X>& a, const Buf<X>& b, size_t n) {
  return n == 0 || std::memcmp(a.p, b.p, n * sizeof(X)) == 0;
}

struct HostErrors {
  u64 word = kNoError;
  ErrorRecord rec{};
  ErrorContext ctx(int32_t op, int64_t limit, uint32_t tag = 7) { return ErrorContext{{&word, &rec, tag, op, 0, limit}}; }
};

// CPU semantics (segment_cpu.cpp validate_indptr): first bad flat position, or -1.
int64_t first_bad(const Problem& pb, int64_t limit) {
  const int64_t len = pb.S + 1, total = pb.rows() * len;
  const int64_t* p = pb.indptr.data();
  for (int64_t i = 0; i < total; ++i) {
    if (indptr_bad(p, i, i % len, len, limit)) return i;
  }
  return -1;
}

void check_error_report(const Problem& pb, const HostErrors& he, int64_t limit, const char* what) {
  const int64_t bad = first_bad(pb, limit);
  if (bad < 0) {
    EXPECT(he.rec.code == 0, "%s: valid indptr reported an error at %lld", what, (long long)he.rec.pos);
  } else {
    const int64_t len = pb.S + 1;
    EXPECT(he.rec.code == 1, "%s: invalid indptr (first bad %lld) not reported", what, (long long)bad);
    EXPECT(he.rec.pos == bad, "%s: reported position %lld, expected %lld", what, (long long)he.rec.pos,
           (long long)bad);
    EXPECT(he.rec.value == pb.indptr[bad], "%s: reported value", what);
    EXPECT(he.rec.prev == (bad % len ? pb.indptr[bad - 1] : 0), "%s: reported prev", what);
    EXPECT(he.rec.len == len && he.rec.rows == pb.rows() && he.rec.limit == limit, "%s: record fields", what);
  }
  EXPECT(he.word == kNoError, "%s: error word not emptied after publishing", what);
}

// ---- reductions ----------------------------------------------------------------------------------------

// misalign: 0 every buffer 16-byte aligned, 1 inputs and outputs one element off, 2 the outputs only (a user's
// out= at a storage offset: the kernels must not take the vector path for them, UBSan checks the stores).
template <class Op, typename T>
void run_reduce_case(const Problem& pb, const Tuning& tune, int misalign, bool invalid) {
  std::mt19937_64 rng(pb.N * 31 + pb.S * 7 + pb.F);
  const int64_t B = pb.B(), n_out = B * pb.S * pb.F;
  const size_t n_in = static_cast<size_t>(B * pb.N * pb.F);
  Buf<T> x = kIsProduct<Op> ? make_factors<T>(rng, n_in, misalign == 1, true) : make_data<T>(rng, n_in, misalign == 1, true);
  Buf<int64_t> ip(pb.indptr.size());
  std::copy(pb.indptr.begin(), pb.indptr.end(), ip.p);
  const Geometry g = pb.geometry(ip.p);
  const bool in_aligned = reinterpret_cast<uintptr_t>(x.p) % 16 == 0;

  Buf<T> first;
  Buf<int64_t> first_arg;
  for (int order = 0; order < 3; ++order) {
    HostExec ex;
    ex.order = order;
    HostErrors he;
    Buf<T> out(static_cast<size_t>(n_out), misalign != 0);
    Buf<int64_t> arg(static_cast<size_t>(Op::kHasArg ? n_out : 0), misalign != 0);
    run_reduce<Op>(ex, g, SrcLoad<T>{x.p}, out.p, Op::kHasArg ? arg.p : nullptr, he.ctx(kOpSegmentCsr, pb.N),
                   in_aligned, tune);
    check_error_report(pb, he, pb.N, "reduce");
    if (order == 0) {
      for (int64_t b = 0; b < B && !invalid; ++b) {
        const int64_t* p = pb.indptr.data() + pb.row_offset(b);
        for (int64_t s = 0, bad = 0; s < pb.S && !bad; ++s) {
          for (int64_t f = 0; f < pb.F && !bad; ++f) {
            std::vector<long double> xs;
            std::vector<int64_t> rows;
            for (int64_t r = p[s]; r < p[s + 1]; ++r) {
              xs.push_back(as_double(x[(b * pb.N + r) * pb.F + f]));
              rows.push_back(r);
            }
            const int64_t o = (b * pb.S + s) * pb.F + f;
            std::string why;
            ++g_reference_checks;
            bad = !Reference<Op>::check(xs, rows, p[s + 1] - p[s], pb.N, out[o], Op::kHasArg ? arg[o] : 0, why);
            EXPECT(!bad, "out[%lld] = %g (arg %lld): %s", (long long)o, as_double(out[o]),
                   (long long)(Op::kHasArg ? arg[o] : 0), why.c_str());
          }
        }
      }
      first = std::move(out);
      first_arg = std::move(arg);
    } else if (!invalid) {  // thread order must not matter (bitwise)
      EXPECT(bitwise_equal(out, first, n_out), "thread order %d changed the result", order);
      if constexpr (Op::kHasArg) EXPECT(bitwise_equal(arg, first_arg, n_out), "thread order %d changed arg", order);
    }
  }
}

// Every reduction of the registry (reduction_table.h) that takes T; g_row_checks counts each row's reference checks
// (main prints them: tests/kernels/test_cuda_emulation.py holds them to the registry's rows).
static long g_row_checks[sizeof(kReductions) / sizeof(kReductions[0])] = {};
template <typename T>
void run_reduce_all(const Problem& pb, const Tuning& tune, int misalign, bool invalid) {
  using A = acc_t<T>;
  for_each_reduce([&](auto r) {
    using Row = Reduction<decltype(r)::value>;
    if constexpr (Row::kIntegers || std::is_floating_point_v<A>) {
      const long before = g_reference_checks;
      run_reduce_case<typename Row::template reducer<A>, T>(pb, tune, misalign, invalid);
      g_row_checks[static_cast<int>(decltype(r)::value)] += g_reference_checks - before;
    }
  });
}

// ---- expansions ----------------------------------------------------------------------------------------

template <typename T>
void run_gather_case(const Problem& pb, const Tuning& tune, int misalign, bool invalid) {
  // gather: src holds one row per segment ([B, S, F]); output has R rows
  std::mt19937_64 rng(pb.N + pb.S + 11);
  const int64_t B = pb.B(), S = pb.S, F = pb.F;
  int64_t max_last = 0;
  for (int64_t r = 0; r < pb.rows(); ++r) max_last = std::max(max_last, pb.indptr[r * (S + 1) + S]);
  if (invalid) max_last = 6;
  Buf<T> src = make_data<T>(rng, static_cast<size_t>(B * S * F), misalign == 1, true);
  Buf<int64_t> ip(pb.indptr.size());
  std::copy(pb.indptr.begin(), pb.indptr.end(), ip.p);
  const Geometry g = pb.geometry(ip.p);  // N is unused by gather's kernels

  // size -1: the validation kernel's max of the last offsets (and its own error slot)
  {
    HostExec ex;
    u64 slots[2] = {kNoError, kNoError};
    HostErrors he;
    launch_validate(ex, g, he.ctx(kOpGatherCsr, -1).with_word(slots), slots + 1, tune);
    const int64_t bad = first_bad(pb, -1);
    EXPECT(invalid || bad < 0, "gather -1: the valid test problem has a bad offset at %lld", (long long)bad);
    EXPECT(bad < 0 ? slots[0] == kNoError : static_cast<int64_t>(slots[0] >> kTagBits) == bad,
           "gather -1: first bad %lld, word %llx", (long long)bad, slots[0]);
    if (!invalid) {
      EXPECT(static_cast<int64_t>(~slots[1]) == max_last, "gather -1: max %lld, expected %lld",
             (long long)~slots[1], (long long)max_last);
    }
  }

  // an invalid indptr may hold any value: use a fixed output size then
  const std::vector<int64_t> sizes = invalid ? std::vector<int64_t>{6} : std::vector<int64_t>{max_last, max_last + 3};
  for (int64_t R : sizes) {
    const int64_t n_out = B * R * F;
    Buf<T> first;
    for (int order = 0; order < 3; ++order) {
      HostExec ex;
      ex.order = order;
      HostErrors he;
      const ErrorContext ec = he.ctx(kOpGatherCsr, R);
      launch_validate(ex, g, ec, nullptr, tune);
      Buf<T> out(static_cast<size_t>(n_out), misalign != 0);
      const bool in_aligned = reinterpret_cast<uintptr_t>(src.p) % 16 == 0;
      run_expand<SrcLoad<T>::kVec>(ex, g, R, GatherFn<T>{src.p}, out.p, ec.publish(g), in_aligned, tune);
      check_error_report(pb, he, R, "gather");
      if (invalid) continue;
      if (order == 0) {
        for (int64_t b = 0; b < B; ++b) {
          const int64_t* p = pb.indptr.data() + pb.row_offset(b);
          for (int64_t r = 0; r < R; ++r) {
            int64_t s = -1;
            if (r >= p[0] && r < p[S]) s = std::upper_bound(p, p + S + 1, r) - p - 1;
            for (int64_t f = 0; f < F; ++f) {
              const T want = s < 0 ? T(0) : src[(b * S + s) * F + f];
              const T got = out[(b * R + r) * F + f];
              EXPECT(same_value(got, want), "gather b%lld r%lld f%lld: %g vs %g", (long long)b, (long long)r,
                     (long long)f, as_double(got), as_double(want));
              if (!same_value(got, want)) return;
            }
          }
        }
        first = std::move(out);
      } else {
        EXPECT(bitwise_equal(out, first, n_out), "gather: thread order %d changed the result", order);
      }
    }
  }
}

// Large offsets for the softmax forward: 1e7 (float32 gave 0.368 for [1e7, 1e7] when softmax was
// exp(x - lse)), near float16's maximum for half.
template <typename T> double large_offset() { return std::is_same_v<T, Half> ? 6e4 : 1e7; }

// forward: x = integer-valued data + offset; backward: y = the data itself (so its reference is exact)
template <typename T>
void run_softmax_case(const Problem& pb, const Tuning& tune, int misalign, bool invalid, double offset) {
  using A = acc_t<T>;
  using Fn = SoftmaxFn<T>;
  std::mt19937_64 rng(pb.N * 3 + pb.S + 5);
  const int64_t B = pb.B(), N = pb.N, S = pb.S, F = pb.F, n = B * N * F;
  Buf<T> y = make_data<T>(rng, static_cast<size_t>(n), misalign == 1, false);
  Buf<T> gr = make_data<T>(rng, static_cast<size_t>(n), misalign == 1, false);
  Buf<T> x = make_data<T>(rng, static_cast<size_t>(n), misalign == 1, true);
  for (int64_t i = 0; i < n; ++i) x[i] = static_cast<T>(static_cast<A>(as_double(x[i]) + offset));
  Buf<int64_t> ip(pb.indptr.size());
  std::copy(pb.indptr.begin(), pb.indptr.end(), ip.p);
  const Geometry g = pb.geometry(ip.p);
  const bool xa = reinterpret_cast<uintptr_t>(x.p) % 16 == 0, ya = reinterpret_cast<uintptr_t>(y.p) % 16 == 0;

  Buf<T> first_sm, first_bw;
  for (int order = 0; order < 3; ++order) {
    HostExec ex;
    ex.order = order;
    // forward: the segments' max and sum of exp(x - max), then out = exp(x - max) / sum
    HostErrors he;
    Buf<typename Fn::State> stats(static_cast<size_t>(B * S * F));
    run_reduce<typename Fn::Stats>(ex, g, SrcLoad<T>{x.p}, stats.p, nullptr, he.ctx(kOpSoftmax, N), xa, tune);
    check_error_report(pb, he, N, "softmax");
    Buf<T> out(static_cast<size_t>(n), misalign != 0);
    run_expand<SrcLoad<T>::kVec>(ex, g, N, Fn{x.p, stats.p}, out.p, Publish{}, xa, tune);
    // backward: y * (g - segsum(g * y))
    HostErrors he2;
    Buf<A> dot(static_cast<size_t>(B * S * F));
    const bool ga = reinterpret_cast<uintptr_t>(gr.p) % 16 == 0;
    run_reduce<SumOp<A>>(ex, g, ProdLoad<T>{gr.p, y.p}, dot.p, nullptr, he2.ctx(kOpSoftmaxBackward, N), ya && ga,
                         tune);
    check_error_report(pb, he2, N, "softmax backward");
    Buf<T> gin(static_cast<size_t>(n), misalign != 0);
    run_expand<SrcLoad<T>::kVec>(ex, g, N, SoftmaxBackwardFn<T>{y.p, gr.p, dot.p}, gin.p, Publish{}, ya && ga, tune);
    if (invalid) continue;
    if (order == 0) {
      for (int64_t b = 0; b < B; ++b) {
        const int64_t* p = pb.indptr.data() + pb.row_offset(b);
        for (int64_t r = 0; r < N; ++r) {
          const int64_t s = (r >= p[0] && r < p[S]) ? std::upper_bound(p, p + S + 1, r) - p - 1 : -1;
          for (int64_t f = 0; f < F; ++f) {
            const int64_t e = (b * N + r) * F + f;
            T want_sm = T(0), want_bw = T(0);
            if (s >= 0) {  // softmax of the stored x in double, two passes; the backward in A
              // a NaN or +inf in the segment, or only -inf: NaN everywhere (as torch.softmax)
              double m = -std::numeric_limits<double>::infinity(), sum = 0;
              bool nan = false;
              A d = 0;
              for (int64_t k = p[s]; k < p[s + 1]; ++k) {
                const double xk = as_double(x[(b * N + k) * F + f]);
                nan |= std::isnan(xk);
                m = std::max(m, xk);
              }
              for (int64_t k = p[s]; k < p[s + 1]; ++k) {
                const int64_t ek = (b * N + k) * F + f;
                sum += std::exp(as_double(x[ek]) - m);
                d += static_cast<A>(gr[ek]) * static_cast<A>(y[ek]);
              }
              const double sm = nan || std::isinf(m) ? std::numeric_limits<double>::quiet_NaN()
                                                     : std::exp(as_double(x[e]) - m) / sum;
              want_sm = static_cast<T>(static_cast<A>(sm));
              want_bw = static_cast<T>(static_cast<A>(y[e]) * (static_cast<A>(gr[e]) - d));
            }
            EXPECT(close_value(out[e], want_sm, tol_for<T>()), "softmax (offset %g) e%lld: %g vs %g", offset,
                   (long long)e, as_double(out[e]), as_double(want_sm));
            EXPECT(same_value(gin[e], want_bw), "softmax backward e%lld: %g vs %g", (long long)e,
                   as_double(gin[e]), as_double(want_bw));
            if (!close_value(out[e], want_sm, tol_for<T>()) || !same_value(gin[e], want_bw)) return;
          }
        }
      }
      first_sm = std::move(out);
      first_bw = std::move(gin);
    } else {
      EXPECT(bitwise_equal(out, first_sm, n), "softmax: thread order %d changed the result", order);
      EXPECT(bitwise_equal(gin, first_bw, n), "softmax backward: thread order %d changed the result", order);
    }
  }
}

// ---- driver --------------------------------------------------------------------------------------------

template <typename T> void run_all_ops(const Problem& pb, const Tuning& tune, int misalign, bool invalid) {
  run_reduce_all<T>(pb, tune, misalign, invalid);
  if (pb.N == pb.S) run_gather_case<T>(pb, tune, misalign, invalid);
  if constexpr (std::is_floating_point_v<acc_t<T>>) {
    run_softmax_case<T>(pb, tune, misalign, invalid, 0.0);
    if (!invalid) run_softmax_case<T>(pb, tune, misalign, false, large_offset<T>());
  }
}

// SEGOPS_EMU_QUICK (CI): one dtype per kernel path: float (4-wide vectors), bfloat16 (8-wide, float
// accumulation), int64 (2-wide, integer reducers). The full build adds double, half and int32.
void run_all_dtypes(const Problem& pb, const Tuning& tune, int misalign, bool invalid) {
  run_all_ops<float>(pb, tune, misalign, invalid);
  run_all_ops<BF16>(pb, tune, misalign, invalid);
  run_all_ops<int64_t>(pb, tune, misalign, invalid);
#ifndef SEGOPS_EMU_QUICK
  run_all_ops<double>(pb, tune, misalign, invalid);
  run_all_ops<Half>(pb, tune, misalign, invalid);
  run_all_ops<int32_t>(pb, tune, misalign, invalid);
#endif
}

Problem gather_problem(std::mt19937_64& rng, std::vector<int64_t> lead, std::vector<int64_t> ind_lead, int64_t S,
                       int64_t F, int64_t rows_out, int kind) {
  // gather: N == S (one src row per segment); offsets cover [0, rows_out]
  Problem pb = make_problem(rng, std::move(lead), std::move(ind_lead), rows_out, S, F, kind);
  pb.N = S;
  pb.name += " (gather)";
  return pb;
}

// ---- error messages ------------------------------------------------------------------------------------

bool has(const std::string& s, const char* part) { return s.find(part) != std::string::npos; }

void check_messages() {
  g_ctx = "indptr messages";
  // the CPU backend's exact texts (tests/api/test_errors.py checks the CPU side)
  EXPECT(indptr_error_message(kOpSegmentCsr, 2, 4, 1, 2, 4, 10) ==
             "torch_segops.segment_csr: indptr must be non-decreasing, got indptr[2] = 2 < indptr[1] = 4",
         "non-decreasing: %s", indptr_error_message(kOpSegmentCsr, 2, 4, 1, 2, 4, 10).c_str());
  EXPECT(indptr_error_message(kOpGatherCsr, 4, 4, 2, -1, 0, 6) ==
             "torch_segops.gather_csr: indptr must start at a non-negative offset, got indptr[row 1][0] = -1",
         "start: %s", indptr_error_message(kOpGatherCsr, 4, 4, 2, -1, 0, 6).c_str());
  EXPECT(indptr_error_message(kOpSoftmaxBackward, 3, 4, 1, 9, 2, 6) ==
             "torch_segops.segment_softmax_csr (backward): indptr[..., -1] must be <= out.size(dim) = 6, got "
             "indptr[3] = 9",
         "limit: %s", indptr_error_message(kOpSoftmaxBackward, 3, 4, 1, 9, 2, 6).c_str());

  g_ctx = "no kernel image message";
  GpuInfo gpu;
  gpu.index = 1;
  gpu.name = "NVIDIA A10";
  gpu.major = 8;
  gpu.minor = 6;
  const std::string m = no_kernel_image_message("segment_csr", "a kernel launch", "cudaErrorNoKernelImageForDevice",
                                                gpu, "75-real;90-real", "13.0", false);
  const char* parts[] = {"torch_segops.segment_csr: ",
                         "cuda:1 (NVIDIA A10, compute capability 8.6, sm_86)",
                         "cudaErrorNoKernelImageForDevice in a kernel launch",
                         "architectures 75-real;90-real (built with CUDA 13.0",
                         "build_info()['cuda_archs']",
                         "none of which runs on sm_86",
                         "install a torch_segops CUDA build whose cuda_archs cover sm_86",
                         "CUDAARCHS=\"86-real\" TORCH_SEGOPS_WITH_CUDA=ON pip install --no-build-isolation .",
                         "python -m torch_segops.doctor"};
  for (const char* part : parts) EXPECT(has(m, part), "missing \"%s\" in: %s", part, m.c_str());
  EXPECT(!has(m, "driver"), "a missing architecture is not a driver problem: %s", m.c_str());

  gpu.major = 12;
  gpu.minor = 0;
  gpu.name.clear();
  const std::string ptx = no_kernel_image_message("gather_csr", "loading the CUDA kernels",
                                                  "cudaErrorUnsupportedPtxVersion", gpu, "75-real;120-virtual",
                                                  "13.0", true);
  const char* ptx_parts[] = {"torch_segops.gather_csr: ", "(unknown GPU, compute capability 12.0, sm_120)",
                             "architectures 75-real;120-virtual", "driver is too old to JIT-compile its PTX",
                             "update the NVIDIA driver", "CUDAARCHS=\"120-real\""};
  for (const char* part : ptx_parts) EXPECT(has(ptx, part), "missing \"%s\" in: %s", part, ptx.c_str());
}

// ---- host-side decisions: the vector path, the plan choice, TORCH_SEGOPS_CUDA_PLANS ---------------------

void check_host_decisions() {
  g_ctx = "vector path";
  alignas(64) static float f[64];
  alignas(64) static double d[16];
  EXPECT(vector_path_ok<4>(true, f) && vector_path_ok<4>(true, f + 4), "aligned float out refused");
  EXPECT(!vector_path_ok<4>(true, f + 1) && !vector_path_ok<4>(true, f + 2), "float out at 4/8 bytes accepted");
  EXPECT(!vector_path_ok<4>(false, f), "misaligned input accepted");
  EXPECT(vector_path_ok<2>(true, d) && !vector_path_ok<2>(true, d + 1), "double out");
  // float states of a 16-bit input: 8 per store, 32 bytes
  EXPECT(vector_path_ok<8>(true, f + 8) && !vector_path_ok<8>(true, f + 4), "32-byte float stores");
  const ReducePlan vp = plan_reduce(1, 100, 10, 16, 4, vector_path_ok<4>(true, f + 1));
  EXPECT(vp.V == 1, "a misaligned out kept vector lanes (V = %d)", vp.V);

  g_ctx = "plan choice";
  Tuning t;
  EXPECT(choose_plan(1000, 10, 1, t) == kPlanBlock && choose_plan(100, 50, 1, t) == kPlanBlock, "F == 1: block");
  EXPECT(choose_plan(100, 50, 8, t) == kPlanShort && choose_plan(1000, 10, 8, t) == kPlanMerge, "F > 1 default");
  t.plans = plan_bit(kPlanMerge);
  EXPECT(choose_plan(100, 50, 1, t) == kPlanMerge && choose_plan(100, 50, 8, t) == kPlanMerge, "merge only");
  t.plans = plan_bit(kPlanShort);
  EXPECT(choose_plan(1000, 10, 1, t) == kPlanShort && choose_plan(1000, 10, 8, t) == kPlanShort, "short only");
  t.plans = plan_bit(kPlanShort) | plan_bit(kPlanBlock);
  EXPECT(choose_plan(1000, 10, 1, t) == kPlanBlock && choose_plan(1000, 10, 8, t) == kPlanShort, "short,block");
  t.plans = plan_bit(kPlanMerge) | plan_bit(kPlanBlock);
  EXPECT(choose_plan(100, 50, 8, t) == kPlanMerge, "merge,block never picks short");
  EXPECT(plan_reduce(0, 10, 3, 4, 4, true, t).kind == kPlanNone && plan_reduce(1, 10, 3, 0, 4, true, t).kind == kPlanNone,
         "nothing to reduce");

  g_ctx = "plans spec";
  unsigned m = 0;
  std::string err;
  EXPECT(parse_plans("", m, err, "X") && m == kAllPlans && parse_plans("all", m, err, "X") && m == kAllPlans, "all");
  EXPECT(parse_plans(" merge , block", m, err, "X") && m == (plan_bit(kPlanMerge) | plan_bit(kPlanBlock)), "list");
  EXPECT(plans_spec(m) == "merge,block" && plans_spec(kAllPlans) == "short,merge,block", "spec %s", plans_spec(m).c_str());
  EXPECT(!parse_plans("merge,fast", m, err, "TORCH_SEGOPS_CUDA_PLANS") &&
             err.find("TORCH_SEGOPS_CUDA_PLANS: unknown CUDA reduction plan 'fast'") != std::string::npos,
         "unknown: %s", err.c_str());
  EXPECT(!parse_plans("block", m, err, "X") && err.find("add short or merge") != std::string::npos, "block alone: %s",
         err.c_str());
  EXPECT(!parse_plans("merge,,short", m, err, "X"), "an empty item accepted");
}

// Block kernels that break the barrier rules: the emulation must abort with the reason (test_cuda_build.py
// runs them as separate processes). kind 0: a thread returns while the others wait at a barrier; 1: half a
// warp skips a shuffle; 2: shared memory read after another thread's write without a barrier (a race: the
// result depends on the order threads run in, which the emulation varies); 3: a tile loop without the barrier
// between the loads of a tile's warp totals and the next tile's stores of them (ScanRows without its second
// __syncthreads), where a shuffle between them hides the race from the thread order.
struct BadBlock {
  static constexpr int kBlock = 64;
  struct Shared {
    int v[kBlock];
  };
  int kind;
  int* out;
  template <class Blk> void operator()(Blk& blk, Shared& sh) const {
    const int t = blk.thread();
    if (kind == 0) {
      if (t == 5) return;
      blk.sync();
    } else if (kind == 1) {
      if (t % 32 < 16) out[t] = blk.shfl_up(t, 1);
      blk.sync();
    } else if (kind == 2) {
      sh.v[t] = t;
      out[t] = sh.v[(t + 1) % kBlock];  // no barrier between the write and the read
    } else {
      int sum = 0;
      for (int tile = 0; tile < 2; ++tile) {
        const int incl = t + blk.shfl_up(t, 1);
        if (t % 32 == 31) SEGOPS_SH_ST(sh.v[t / 32], incl + tile);
        blk.sync();
        for (int w = 0; w < kBlock / 32; ++w) sum += SEGOPS_SH_LD(sh.v[w]);
        // (the barrier the next tile's stores need is missing here)
      }
      out[t] = sum;
    }
  }
};

int run_bad_block(int kind) {
  std::vector<int> first;
  for (int order = 0; order < 3; ++order) {
    HostExec ex;
    ex.order = order;
    std::vector<int> out(BadBlock::kBlock, -1);
    ex.launch_blocks(BadBlock{kind, out.data()}, 2);
    if (order == 0) first = out;
    if (out != first) {
      std::printf("race: the result depends on the thread order\n");
      return 1;
    }
  }
  return 0;
}


// ---- the host glue's error protocol -------------------------------------------------------------------------
// An op call on the GPU (CudaBackend, segment_cuda.cu; index_to_indptr, coo_kernels.cuh): the call's tag, its
// slot of the error word armed in a PublishOnAbort, the launches that validate into the word, the last launch
// that publishes: the sequence of call_errors.cuh (CallErrors) and run_index_to_indptr, the code the library
// runs. Here a call can end between two launches (HostExec::fail_launch / fail_workspace, or an exception
// between them as gather_into's out= check), and a word can be left behind by another call.

Problem one_row(const std::vector<int64_t>& indptr, int64_t N, int64_t F) {
  Problem pb;
  pb.N = N;
  pb.S = static_cast<int64_t>(indptr.size()) - 1;
  pb.F = F;
  pb.indptr = indptr;
  pb.name = "one row";
  return pb;
}

// gather_into's order (segment_ops.h) with CudaBackend's CallErrors (call_errors.cuh): the validation, then
// (unless out_throws: the out= check throws there) the expansion that publishes, then the call's end.
void gather_call(HostErrors& he, uint32_t n, const Problem& pb, int64_t R, bool out_throws) {
  Buf<int64_t> ip(pb.indptr.size());
  std::copy(pb.indptr.begin(), pb.indptr.end(), ip.p);
  const Geometry g = pb.geometry(ip.p);
  Buf<float> src(static_cast<size_t>(pb.S * pb.F)), out(static_cast<size_t>(R * pb.F));
  for (size_t i = 0; i < src.n; ++i) src[i] = static_cast<float>(i);
  HostExec ex;
  ex.call_slot = he.ctx(kOpGatherCsr, -1, call_tag(n));
  try {
    CallErrors<HostExec> errors(ex, g);
    errors.validate_for_expand(R);
    if (out_throws) throw ExecFailure{};
    errors.expand<SrcLoad<float>::kVec>(R, GatherFn<float>{src.p}, out.p, true);
    errors.end();
  } catch (const ExecFailure&) {
  }
}

// A reduction call as CudaBackend makes it, ending at launch fail_launch (-1: runs to its end). Returns the
// launches it made.
int64_t reduce_call(HostErrors& he, uint32_t n, const Problem& pb, const Tuning& t, int64_t fail_launch) {
  Buf<int64_t> ip(pb.indptr.size());
  std::copy(pb.indptr.begin(), pb.indptr.end(), ip.p);
  const Geometry g = pb.geometry(ip.p);
  Buf<float> x(static_cast<size_t>(pb.B() * pb.N * pb.F)), out(static_cast<size_t>(pb.B() * pb.S * pb.F));
  for (size_t i = 0; i < x.n; ++i) x[i] = static_cast<float>(i % 7);
  HostExec ex;
  ex.fail_launch = fail_launch;
  ex.call_slot = he.ctx(kOpSegmentCsr, -1, call_tag(n));
  try {
    CallErrors<HostExec> errors(ex, g);
    errors.reduce<SumOp<float>>(SrcLoad<float>{x.p}, out.p, nullptr, pb.N, true, t);
    errors.end();
  } catch (const ExecFailure&) {
  }
  return ex.launches;
}

void check_error_protocol(const Tunings& ts) {
  // 1. gather's out= check throws after its validation launch: the guard publishes the error found, the word
  // is left empty, and a later call whose first bad position is larger is reported (an error word left
  // holding 3 << 16 | tag hid it: atomicMin).
  g_ctx = "protocol: gather ending after its validation";
  {
    HostErrors he;
    gather_call(he, 100, one_row({0, 1, 5, 2, 6}, 4, 2), 6, true);
    EXPECT(he.word == kNoError, "the call left its error in the word (%llx)", he.word);
    EXPECT(he.rec.code == 1 && he.rec.pos == 3 && he.rec.value == 2 && he.rec.prev == 5, "error not published");
    he.rec.code = 0;  // the host reported it
    gather_call(he, 101, one_row({0, 1, 2, 3, 1}, 4, 2), 6, false);
    EXPECT(he.rec.code == 1 && he.rec.pos == 4 && he.word == kNoError, "the next call's error (position 4) was lost");
  }
  // 2. a reduction ending at each of its launches, on every plan (block, merge, short with its pieces): nothing
  // stays in the word, a published error is the first bad offset, and the next call's error is reported.
  struct PlanCase {
    const char* name;
    const Tuning* t;
    int64_t N, F;
  };
  const PlanCase plans[] = {{"block", &ts.dflt, 40, 1}, {"merge", &ts.tiny, 40, 16}, {"short", &ts.tiny_short, 40, 4}};
  for (const PlanCase& pc : plans) {
    const Problem bad = one_row({0, 10, 30, 20, 40}, pc.N, pc.F);  // first bad: position 3
    HostErrors probe;
    const int64_t launches = reduce_call(probe, 0, bad, *pc.t, -1);
    for (int64_t k = 0; k < launches; ++k) {
      g_ctx = std::string("protocol: ") + pc.name + " plan ending at launch " + std::to_string(k);
      HostErrors he;
      reduce_call(he, 200, bad, *pc.t, k);
      EXPECT(he.word == kNoError, "the call left %llx in the word", he.word);
      EXPECT(he.rec.code == 0 || he.rec.pos == 3, "published position %lld", (long long)he.rec.pos);
      he.rec.code = 0;
      reduce_call(he, 201, one_row({0, 10, 20, 30, 35, 36, 1}, pc.N, pc.F), *pc.t, -1);
      EXPECT(he.rec.code == 1 && he.rec.pos == 6 && he.word == kNoError, "the next call's error was lost");
    }
  }
  // 3. a word left behind by another call (a context that died before its publish ran, or a library from
  // before the guard) with tag T: 2^16 calls later the call with tag T must not take it for its own. Beyond
  // this call's indptr (5 offsets: AddressSanitizer sees a read of indptr[9]) or at an offset that is valid
  // here, it is emptied and not reported; a real error of the call at a smaller position is reported.
  const uint32_t T = 77;
  EXPECT(call_tag(T + (1u << kTagBits)) == call_tag(T) && call_tag(T + 1) != call_tag(T), "tags");
  for (int64_t stale : {9, 2, 1 << 20}) {
    for (const PlanCase& pc : plans) {
      g_ctx = std::string("protocol: stale word at ") + std::to_string(stale) + ", " + pc.name + " plan";
      HostErrors he;
      he.word = (static_cast<u64>(stale) << kTagBits) | call_tag(T);
      reduce_call(he, T + (1u << kTagBits), one_row({0, 10, 20, 30, 40}, pc.N, pc.F), *pc.t, -1);
      EXPECT(he.rec.code == 0 && he.word == kNoError, "stale word: record %d at %lld, word %llx", he.rec.code,
             (long long)he.rec.pos, he.word);
      he.word = (static_cast<u64>(stale) << kTagBits) | call_tag(T);
      reduce_call(he, T + (2u << kTagBits), one_row({0, 10, 5, 30, 40}, pc.N, pc.F), *pc.t, -1);
      EXPECT(he.rec.code == 1 && he.rec.pos == 2 && he.word == kNoError, "the call's own error at 2: %d at %lld",
             he.rec.code, (long long)he.rec.pos);
    }
    g_ctx = "protocol: stale word at " + std::to_string(stale) + ", gather";
    HostErrors he;
    he.word = (static_cast<u64>(stale) << kTagBits) | call_tag(T);
    gather_call(he, T + (1u << kTagBits), one_row({0, 1, 2, 3, 4}, 4, 2), 6, false);
    EXPECT(he.rec.code == 0 && he.word == kNoError, "stale word published by gather");
  }
  // 4. a word holding another call's tag is left alone (that call publishes it); our own is published.
  g_ctx = "protocol: publish tag";
  {
    u64 word = (static_cast<u64>(5) << kTagBits) | 9;
    ErrorRecord rec{};
    int64_t p[] = {0, 1, 2, 3, 4, 3, 6};
    Publish pub{ErrorSlot{&word, &rec, 8}, p, 7, 1};
    pub.run();
    EXPECT(rec.code == 0 && word == ((static_cast<u64>(5) << kTagBits) | 9), "foreign tag was published");
    pub.to.tag = 9;
    pub.run();
    EXPECT(rec.code == 1 && rec.pos == 5 && rec.value == 3 && rec.prev == 4 && word == kNoError,
           "own tag not published");
  }
}

// ---- index_to_indptr (coo_kernels.cuh) ---------------------------------------------------------------------

// The CPU's first problem of a [rows, n] index (cpu/coo_cpu.cpp first_problem): (what, position), or (-1, -1).
std::pair<int32_t, int64_t> index_first_problem(const std::vector<int64_t>& x, int64_t n, int64_t size,
                                                 bool check_sorted) {
  const int64_t total = static_cast<int64_t>(x.size());
  if (check_sorted) {
    for (int64_t i = 1; i < total; ++i) {
      if (i % n != 0 && x[i] < x[i - 1]) return {kIndexUnsorted, i};
    }
  }
  for (int64_t i = 0; i < total; ++i) {
    if (x[i] < 0) return {kIndexNegative, i};
  }
  for (int64_t i = 0; i < total; ++i) {
    if (size >= 0 && x[i] >= size) return {kIndexTooLarge, i};
  }
  return {-1, -1};
}

// index_to_indptr of x (rows of n) for every thread order, against the CPU's contract: offsets[r][t] = the
// entries of row r smaller than t (whatever the index holds), the first problem reported as the CPU reports
// it, with its message. size -1: max(index) + 1 and the check without an upper bound (launch_index_max).
template <typename I>
void run_index_case(const std::vector<int64_t>& xs, int64_t rows, int64_t n, int64_t size, bool check_sorted,
                    const char* what) {
  const int64_t total = rows * n;
  Buf<I> x(static_cast<size_t>(total));
  for (int64_t i = 0; i < total; ++i) x[i] = static_cast<I>(xs[i]);
  IndexRows<I> ix;
  ix.x = x.p;
  ix.rows = rows;
  ix.n = n;
  ix.size = size;
  ix.check_sorted = check_sorted;
  g_ctx = std::string("index_to_indptr: ") + what + (sizeof(I) == 4 ? " int32" : " int64") +
          (check_sorted ? " sorted" : " unsorted allowed") + " size " + std::to_string(size);
  const int64_t max_threads = total % 3 == 0 ? 7 : kIndexThreadsMax;  // 7: every thread takes many entries
  if (size < 0) {
    u64 words[2] = {kNoError, kNoError};
    HostExec ex;
    launch_index_max(ex, ix, words, max_threads);
    int64_t mx = -1;
    for (int64_t v : xs) mx = std::max(mx, v);
    const auto [w, pos] = index_first_problem(xs, n, -1, check_sorted);
    const u64 key = words[0] >> kTagBits;
    EXPECT(w < 0 ? words[0] == kNoError : key == index_error_key(w, pos, total), "size -1: problem %d at %lld, word %llx",
           w, (long long)pos, words[0]);
    EXPECT(static_cast<int64_t>(~words[1]) == mx + 1, "size -1: max + 1 = %lld, expected %lld",
           (long long)~words[1], (long long)mx + 1);
    if (w >= 0) return;
    size = ix.size = mx + 1;
  }
  const int64_t len = size + 1;
  const auto [w, pos] = index_first_problem(xs, n, size, check_sorted);
  std::vector<int64_t> want(static_cast<size_t>(rows * len), 0);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t t = 0; t <= size; ++t) {
      for (int64_t k = 0; k < n; ++k) want[r * len + t] += xs[r * n + k] < t;
    }
  }
  for (int order = 0; order < 3; ++order) {
    HostExec ex;
    ex.order = order;
    HostErrors he;
    Buf<int64_t> off(static_cast<size_t>(rows * len));
    run_index_to_indptr(ex, ix, ErrorSlot{&he.word, &he.rec, 5, kOpIndexToIndptr, 0, size}, off.p,
                        order == 1 ? 7 : max_threads);
    bool same = true;
    for (int64_t i = 0; i < rows * len && same; ++i) {
      same = off[i] == want[i];
      EXPECT(same, "offsets[%lld] = %lld, expected %lld (thread order %d)", (long long)i, (long long)off[i],
             (long long)want[i], order);
    }
    EXPECT(he.word == kNoError, "error word not emptied");
    if (w < 0) {
      EXPECT(he.rec.code == 0, "a valid index reported %d at %lld", he.rec.what, (long long)he.rec.pos);
      continue;
    }
    EXPECT(he.rec.code == 1 && he.rec.what == w && he.rec.pos == pos && he.rec.value == xs[pos] &&
               he.rec.prev == (pos % n ? xs[pos - 1] : 0) && he.rec.len == n && he.rec.rows == rows &&
               he.rec.limit == size && he.rec.op == kOpIndexToIndptr,
           "reported %d: problem %d at %lld, expected %d at %lld", he.rec.code, he.rec.what, (long long)he.rec.pos, w,
           (long long)pos);
  }
}

void check_index_to_indptr() {
  // the CPU's contract (tests/api/test_coo.py): an unsorted row gets the counts when check_sorted is false
  run_index_case<int64_t>({3, 0, 2, 0}, 1, 4, 5, false, "contract [3, 0, 2, 0]");
  {
    HostExec ex;
    HostErrors he;
    const int64_t x[] = {3, 0, 2, 0};
    Buf<int64_t> off(6);
    IndexRows<int64_t> ix;
    ix.x = x;
    ix.rows = 1;
    ix.n = 4;
    ix.size = 5;
    run_index_to_indptr(ex, ix, ErrorSlot{&he.word, &he.rec, 5, kOpIndexToIndptr, 0, 5}, off.p);
    const int64_t want[] = {0, 2, 2, 3, 4, 4};
    g_ctx = "index_to_indptr: [3, 0, 2, 0], size 5";
    EXPECT(std::equal(want, want + 6, off.p) && he.rec.code == 0, "offsets %lld %lld %lld %lld %lld %lld",
           (long long)off[0], (long long)off[1], (long long)off[2], (long long)off[3], (long long)off[4],
           (long long)off[5]);
  }
  run_index_case<int64_t>({3, 0, 2, 0, 1, 1, 0, 2}, 2, 4, 5, false, "two unsorted rows");
  run_index_case<int32_t>({3, 0, 2, 0}, 1, 4, 5, true, "unsorted, check_sorted");
  // an all-zero index with a large dim_size: the offsets past the last value are written in parallel
  run_index_case<int64_t>(std::vector<int64_t>(300, 0), 1, 300, 200000, true, "all zero, large size");
  run_index_case<int32_t>(std::vector<int64_t>(64, 7), 2, 32, -1, true, "all seven, size -1");
  run_index_case<int64_t>({}, 0, 5, 3, true, "empty");
  run_index_case<int64_t>({}, 3, 0, 4, false, "no entries");
  run_index_case<int64_t>({0, 1, 1, 2}, 1, 4, 0, true, "dim_size 0");
  // each problem alone and together, first in the CPU's order
  run_index_case<int64_t>({0, 2, 1, 5, -1, 9}, 2, 3, 6, true, "decrease, negative, too large");
  run_index_case<int64_t>({0, 2, 1, 5, -1, 9}, 2, 3, 6, false, "negative, too large");
  run_index_case<int32_t>({0, 2, 3, 5, 6, 9}, 2, 3, 6, false, "too large");
  run_index_case<int64_t>({4, 2, 1, -3, -1, 0}, 2, 3, -1, true, "size -1: decrease before negative");
  run_index_case<int64_t>({-4, 2, 3, 3, 5, 5}, 2, 3, -1, false, "size -1: negative");
  // size -1 with the int64 maximum in the index: the kernel keeps max + 1 without a signed overflow and the host
  // reads the maximum back (the call then refuses it: index_args.h size_after_max)
  g_ctx = "index_to_indptr: size -1, the int64 maximum";
  for (const int64_t big : {std::numeric_limits<int64_t>::max(), std::numeric_limits<int64_t>::max() - 1}) {
    const int64_t x[] = {0, 5, big, 3, -1};
    for (int64_t total : {3, 5}) {
      IndexRows<int64_t> ix;
      ix.x = x;
      ix.rows = 1;
      ix.n = total;
      u64 words[2] = {kNoError, kNoError};
      HostExec ex;
      launch_index_max(ex, ix, words, 2);
      EXPECT(index_max_of_word(words[1]) == big, "max %lld, expected %lld", (long long)index_max_of_word(words[1]),
             (long long)big);
      EXPECT(total == 3 ? words[0] == kNoError : words[0] >> kTagBits == index_error_key(kIndexNegative, 4, total),
             "word %llx", words[0]);
    }
  }
  EXPECT(index_max_of_word(kNoError) == -1, "an empty index has no maximum");
  std::mt19937_64 rng(37);
  for (int it = 0; it < 60; ++it) {
    const int64_t rows = 1 + static_cast<int64_t>(rng() % 3), n = static_cast<int64_t>(rng() % 300);
    const int64_t size = it % 5 == 0 ? -1 : static_cast<int64_t>(rng() % 200);
    const int64_t hi = size < 0 ? 150 : size;
    std::vector<int64_t> xs(static_cast<size_t>(rows * n));
    for (auto& v : xs) v = hi > 0 ? static_cast<int64_t>(rng() % hi) : 0;
    const int kind = it % 4;  // 0 sorted rows, 1 unsorted, 2 sorted with a value out of range, 3 runs of equal values
    for (int64_t r = 0; r < rows; ++r) {
      if (kind != 1) std::sort(xs.begin() + r * n, xs.begin() + (r + 1) * n);
    }
    if (kind == 2 && !xs.empty()) xs[rng() % xs.size()] = rng() % 2 ? -1 - static_cast<int64_t>(rng() % 5) : hi + 3;
    if (kind == 3) {
      for (auto& v : xs) v = v / 40 * 40;
    }
    const std::string name = "random " + std::to_string(it);
    run_index_case<int64_t>(xs, rows, n, size, it % 2 == 0, name.c_str());
    run_index_case<int32_t>(xs, rows, n, size, it % 2 == 1, name.c_str());
  }
  // a call ending between its launches publishes the error its first launch found; a stale word whose entry
  // has no such problem in this index is emptied unread
  g_ctx = "index_to_indptr: a call ending after its first launch";
  {
    const int64_t x[] = {0, 1, -2, 3};
    IndexRows<int64_t> ix;
    ix.x = x;
    ix.rows = 1;
    ix.n = 4;
    ix.size = 4;
    HostErrors he;
    Buf<int64_t> off(5);
    HostExec ex;
    ex.fail_workspace = true;
    try {
      run_index_to_indptr(ex, ix, ErrorSlot{&he.word, &he.rec, 5, kOpIndexToIndptr, 0, 4}, off.p);
    } catch (const ExecFailure&) {
    }
    EXPECT(he.word == kNoError && he.rec.code == 1 && he.rec.what == kIndexNegative && he.rec.pos == 2,
           "word %llx, record %d at %lld", he.word, he.rec.code, (long long)he.rec.pos);
    for (u64 stale : {index_error_key(kIndexNegative, 1, 4), index_error_key(kIndexTooLarge + 1, 0, 4)}) {
      HostErrors h2;
      h2.word = (stale << kTagBits) | 5;
      const int64_t y[] = {0, 1, 2, 3};
      ix.x = y;
      HostExec ex2;
      run_index_to_indptr(ex2, ix, ErrorSlot{&h2.word, &h2.rec, 5, kOpIndexToIndptr, 0, 4}, off.p);
      EXPECT(h2.word == kNoError && h2.rec.code == 0, "stale index word published");
    }
  }
  g_ctx = "index_to_indptr: messages";
  EXPECT(found_error_message(kOpIndexToIndptr, kIndexNegative, 0, 6, 4, 2, -3, 1, 9) ==
             "torch_segops.index_to_indptr: index must be non-negative, got index[..., 2] = -3 (row 1) (found on "
             "cuda:0 by the GPU in an earlier call of index_to_indptr, whose output is unspecified; CUDA ops check "
             "indptr and index asynchronously and report at the next torch_segops CUDA call or at "
             "torch_segops.check_errors(); set TORCH_SEGOPS_CUDA_SYNC_CHECKS=1 to report in the faulty call)",
         "%s", found_error_message(kOpIndexToIndptr, kIndexNegative, 0, 6, 4, 2, -3, 1, 9).c_str());
  EXPECT(index_error_message(kIndexUnsorted, 5, 3, 1, 2, 4) ==
             "index must be sorted (non-decreasing) along its last dim, got index[..., 2] = 1 < index[..., 1] = 2 "
             "(in row 1 of the flattened leading dims); use scatter() for an unsorted index",
         "unsorted message");
  EXPECT(index_error_message(kIndexTooLarge, 1, 3, 9, 2, 4) ==
             "index must be < dim_size = 4, got index[..., 1] = 9 (row 0)",
         "too large message");
}

// ---- logsumexp of segments holding +inf, on every plan (issue #37 item 1) -----------------------------------
// Long segments with +inf in several rows: parts whose max is +inf are merged (the thread states of the block
// plan's scan, the carries of the merge plan, the pieces of the short plan's long segments), where
// LogSumExpOp::merge once computed exp(inf - inf) = NaN; torch.logsumexp gives +inf. Also segments of -inf
// only (-inf) and of -inf with finite values (finite).
template <typename T>
void run_logsumexp_infinity(const char* plan, const Tuning& t, int64_t F, const std::vector<int64_t>& indptr) {
  using Op = LogSumExpOp<acc_t<T>>;
  const Problem pb = one_row(indptr, indptr.back(), F);
  const int64_t N = pb.N, S = pb.S;
  Buf<T> x(static_cast<size_t>(N * F));
  const double inf = std::numeric_limits<double>::infinity();
  for (int64_t r = 0; r < N; ++r) {
    for (int64_t f = 0; f < F; ++f) {
      double v = static_cast<double>((r * 7 + f) % 5) - 2;
      const int64_t s = std::upper_bound(indptr.begin(), indptr.end(), r) - indptr.begin() - 1;
      if (s % 3 == 0 && (r - indptr[s]) % 37 == 5) v = inf;             // +inf every 37 rows
      if (s % 3 == 1) v = -inf;                                          // -inf only
      if (s % 3 == 2 && (r - indptr[s]) % 3 == 0) v = -inf;             // -inf among finite values
      x[r * F + f] = static_cast<T>(static_cast<acc_t<T>>(v));
    }
  }
  Buf<int64_t> ip(indptr.size());
  std::copy(indptr.begin(), indptr.end(), ip.p);
  HostExec ex;
  HostErrors he;
  Buf<T> out(static_cast<size_t>(S * F));
  const int kind = run_reduce<Op>(ex, pb.geometry(ip.p), SrcLoad<T>{x.p}, out.p, nullptr, he.ctx(kOpSegmentCsr, N),
                                  true, t);
  g_ctx = std::string("logsumexp with infinities, ") + plan + " plan, F" + std::to_string(F);
  EXPECT(kind == (std::strcmp(plan, "block") == 0 ? kPlanBlock : std::strcmp(plan, "merge") == 0 ? kPlanMerge : kPlanShort),
         "ran plan %d", kind);
  for (int64_t s = 0; s < S; ++s) {
    for (int64_t f = 0; f < F; ++f) {
      std::vector<long double> xs;
      std::vector<int64_t> rows;
      for (int64_t r = indptr[s]; r < indptr[s + 1]; ++r) {
        xs.push_back(as_double(x[r * F + f]));
        rows.push_back(r);
      }
      std::string why;
      const bool ok = Reference<Op>::check(xs, rows, indptr[s + 1] - indptr[s], N, out[s * F + f], 0, why);
      EXPECT(ok, "segment %lld (%lld rows) feature %lld: %g, %s", (long long)s, (long long)(indptr[s + 1] - indptr[s]),
             (long long)f, as_double(out[s * F + f]), why.c_str());
      if (!ok) return;
    }
  }
}

void check_special_values(const Tunings& ts) {
  // the shapes: 40 rows on the block plan, F = 16 on the merge plan, a 2,000-row segment on the short
  // plan (among 8-row segments, so that the default tuning picks it and cuts the long one in pieces)
  std::vector<int64_t> short_ip = {0, 2000};
  while (short_ip.size() < 252) short_ip.push_back(short_ip.back() + 8);
  run_logsumexp_infinity<float>("block", ts.dflt, 1, {0, 40, 80, 120});
  run_logsumexp_infinity<float>("block", ts.tiny, 1, {0, 700, 1400, 2100});
  run_logsumexp_infinity<BF16>("block", ts.dflt, 1, {0, 300, 600, 900});
  run_logsumexp_infinity<float>("merge", ts.dflt, 16, {0, 400, 800, 1200});
  run_logsumexp_infinity<float>("merge", ts.tiny, 16, {0, 60, 120, 180});
  run_logsumexp_infinity<double>("merge", ts.tiny, 3, {0, 60, 120, 180});
  run_logsumexp_infinity<float>("merge", ts.tiny_merge_only, 1, {0, 60, 120, 180});
  run_logsumexp_infinity<float>("short", ts.dflt, 4, short_ip);
  run_logsumexp_infinity<BF16>("short", ts.tiny_short, 8, {0, 60, 120, 180});
  run_logsumexp_infinity<float>("short", ts.tiny_short_only, 1, {0, 60, 120, 180});
}

struct Shard {
  int index = 0, count = 1;
  bool mine(size_t i) const { return static_cast<int>(i % static_cast<size_t>(count)) == index; }
};

// Every op, dtype path and plan against the reference, thread orders, invalid indptr. Every shard draws the
// same problems (the generator runs through all of them) and checks its own.
void check_kernels(bool quick, Shard shard, const Tunings& ts) {
  std::mt19937_64 rng(2024);
  const Tuning &dflt = ts.dflt, &tiny = ts.tiny, &tiny_short = ts.tiny_short, &mid = ts.mid;
  const Tuning &tiny_merge_only = ts.tiny_merge_only, &tiny_short_only = ts.tiny_short_only;
  const Tuning* tunings[] = {&dflt, &tiny, &mid, &tiny_short, &tiny_merge_only, &tiny_short_only};
  const char* tuning_names[] = {"default", "tiny", "mid", "tiny-short", "tiny-merge-only", "tiny-short-only"};

  struct Shape {
    std::vector<int64_t> lead, ind_lead;
    int64_t N, S, F;
  };
  std::vector<Shape> shapes = {
      {{}, {}, 40, 7, 1},          {{}, {}, 200, 30, 1},         {{}, {}, 300, 5, 16},
      {{}, {}, 64, 64, 8},         {{}, {}, 90, 200, 2},         {{}, {}, 120, 12, 24},
      {{}, {}, 50, 9, 3},          {{}, {}, 30, 4, 72},          {{}, {}, 0, 5, 4},
      {{}, {}, 17, 0, 4},          {{3}, {3}, 60, 6, 4},         {{3}, {1}, 60, 6, 1},
      {{2, 3}, {2, 1}, 40, 5, 8},  {{2, 3}, {1, 3}, 33, 4, 2},   {{4, 1, 2}, {4, 1, 1}, 20, 3, 16},
      {{2}, {2}, 2000, 3, 1},      {{}, {}, 1500, 600, 1},       {{}, {}, 9, 9, 130},
      {{2}, {1}, 1200, 150, 4},  // short plan (8 rows a segment on average) with the default pieces of 128 rows
  };
  if (!quick) shapes.push_back({{}, {}, 3000, 40, 8});

  for (size_t si = 0; si < shapes.size(); ++si) {
    for (int kind = 0; kind < 8; ++kind) {
      const Shape& sh = shapes[si];
      const Problem pb = make_problem(rng, sh.lead, sh.ind_lead, sh.N, sh.S, sh.F, kind);
      const bool mine = shard.mine(si);
      for (int ti = 0; ti < 6 && mine; ++ti) {
        if (quick && ti == 2) continue;
        if (ti >= 4 && sh.F != 1) continue;  // F > 1: the same plans as tiny / tiny-short
        for (int mis = 0; mis < 3; ++mis) {
          if (mis != 0 && (kind % 2 == 1 || ti != 0)) continue;
          g_ctx = pb.name + " tuning=" + tuning_names[ti] + (mis == 1 ? " misaligned" : mis == 2 ? " misaligned out" : "");
          run_all_dtypes(pb, *tunings[ti], mis, false);
        }
      }
      // gather shapes: N == S
      const Problem gp = gather_problem(rng, sh.lead, sh.ind_lead, sh.S, sh.F, sh.N, kind);
      for (int ti = 0; ti < 2 && mine; ++ti) {
        g_ctx = gp.name + " tuning=" + tuning_names[ti];
        run_gather_case<float>(gp, *tunings[ti], false, false);
        run_gather_case<BF16>(gp, *tunings[ti], ti == 1 ? 1 : 0, false);
        run_gather_case<float>(gp, *tunings[ti], 2, false);
        run_gather_case<int64_t>(gp, *tunings[ti], false, false);
      }
    }
  }

  // Invalid offsets: decreasing, negative, past the end, huge values. Nothing may read or write out of
  // bounds (AddressSanitizer), and the first bad position must be reported.
  const int64_t huge = std::numeric_limits<int64_t>::max() / 2;
  std::vector<std::vector<int64_t>> bad_rows = {
      {0, 4, 2, 6},       {-1, 2, 6},         {0, 2, 7},          {0, 6, 6, 6, 9},      {5, 3, 1, 0},
      {0, huge, 3, 6},    {-huge, 0, 6},      {0, 3, -huge},      {2, 2, 2, huge},      {6, 0},
      {0, 1, 2, 3, 4, 5, 7}, {3, 5, 4, 6},    {0, 0, 0, 0, 0, 0, -1},
  };
  for (const auto& row : bad_rows) {
    if (shard.index != 0) break;
    for (int64_t F : {1, 3, 8, 16}) {
      Problem pb;
      pb.N = 6;
      pb.S = static_cast<int64_t>(row.size()) - 1;
      pb.F = F;
      pb.indptr = row;
      pb.name = "invalid indptr F" + std::to_string(F);
      for (int ti = 0; ti < 2; ++ti) {
        g_ctx = pb.name + " tuning=" + tuning_names[ti];
        run_all_dtypes(pb, *tunings[ti], false, true);
      }
      // batched, with one bad row among good ones
      Problem pb2 = pb;
      pb2.lead = {3};
      pb2.ind_lead = {3};
      std::vector<int64_t> good(row.size());
      for (size_t i = 0; i < good.size(); ++i) good[i] = std::min<int64_t>(6, static_cast<int64_t>(i));
      pb2.indptr = good;
      pb2.indptr.insert(pb2.indptr.end(), row.begin(), row.end());
      pb2.indptr.insert(pb2.indptr.end(), good.begin(), good.end());
      g_ctx = pb.name + " batched";
      run_all_dtypes(pb2, tiny, false, true);
      run_all_dtypes(pb2, tiny_short, false, true);
      if (F == 1) {
        run_all_dtypes(pb2, tiny_merge_only, false, true);
        run_all_dtypes(pb2, tiny_short_only, false, true);
      }
      // gather with the same offsets (S rows of src, output size 6)
      Problem gp = pb;
      gp.N = gp.S;
      g_ctx = pb.name + " gather";
      run_gather_case<float>(gp, dflt, false, true);
      run_gather_case<int32_t>(gp, tiny, false, true);
    }
  }
  // Random garbage offsets.
  for (int it = 0; it < (quick ? 20 : 60) && shard.index == 0; ++it) {
    Problem pb;
    pb.N = static_cast<int64_t>(rng() % 40);
    pb.S = static_cast<int64_t>(rng() % 12);
    pb.F = static_cast<int64_t>(1 + rng() % 9);
    std::uniform_int_distribution<int64_t> v(-5, pb.N + 5);
    pb.indptr.resize(static_cast<size_t>(pb.S + 1));
    for (auto& o : pb.indptr) o = v(rng);
    pb.name = "garbage " + std::to_string(it);
    g_ctx = pb.name;
    run_all_ops<float>(pb, it % 2 ? tiny : dflt, false, true);
    run_all_ops<int64_t>(pb, tiny, false, true);
    run_all_ops<BF16>(pb, tiny_short, false, true);
  }

}

int main(int argc, char** argv) {
  if (argc > 2 && std::strcmp(argv[1], "--bad-block") == 0) return run_bad_block(std::atoi(argv[2]));
  // --quick: the CI subset; --only a,b: these parts alone (kernels, protocol, coo, specials, messages);
  // --shard i/n: of the kernels part, the shapes with index % n == i (the invalid offsets with shard 0)
  bool quick = false;
  std::string only;
  Shard shard;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--quick") == 0) {
      quick = true;
    } else if (std::strcmp(argv[i], "--only") == 0 && i + 1 < argc) {
      only = "," + std::string(argv[++i]) + ",";
    } else if (std::strcmp(argv[i], "--shard") == 0 && i + 1 < argc &&
               std::sscanf(argv[++i], "%d/%d", &shard.index, &shard.count) == 2 && shard.count > 0 &&
               shard.index >= 0 && shard.index < shard.count) {
    } else {
      std::fprintf(stderr, "usage: %s [--quick] [--only part,...] [--shard i/n] | --bad-block kind\n", argv[0]);
      return 2;
    }
  }
  auto part = [&](const char* name) { return only.empty() || only.find("," + std::string(name) + ",") != std::string::npos; };
  const Tunings ts = make_tunings();
  if (part("kernels")) {
    check_kernels(quick, shard, ts);
    std::printf("reference checks by reduction:");
    for_each_reduce([](auto r) {
      constexpr Reduce kRow = decltype(r)::value;
      std::printf(" %s %ld", Reduction<kRow>::short_name, g_row_checks[static_cast<int>(kRow)]);
    });
    std::printf("\n");
  }
  if (part("protocol")) check_error_protocol(ts);
  if (part("coo")) check_index_to_indptr();
  if (part("specials")) check_special_values(ts);
  if (part("messages")) {
    check_messages();
    check_host_decisions();
  }

  std::printf("reads of never-written workspace bytes: %ld\n", g_uninit_reads);
  std::printf("%ld passed, %ld failed\n", g_checks - g_failures, g_failures);
  return g_failures == 0 ? 0 : 1;
}
