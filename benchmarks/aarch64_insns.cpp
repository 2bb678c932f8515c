// Instructions per element of the CPU kernels on aarch64, against plain loops (issue #39): the driver that
// benchmarks/aarch64_insns.py cross-compiles and runs under qemu-aarch64, which counts the instructions.
//
//   aarch64_insns <op> <variant> <segments> <rows per segment> <features> <reps>
//     op: sum, max, min (with the first row holding it), lse (logsumexp), softmax, gather;
//         tiny (the counting method's check: <segments> iterations of segops_tiny_loop, the rest ignored)
//     variant: lib (the library's kernel code) or plain (simple scalar loops the compiler may vectorise)
//
// Inputs are random finite floats in [-4, 4) from a fixed seed, every segment `rows` long. The variant runs
// `reps` times, then the other variant once, and the two results are compared (min/max and arg and gather
// exactly, sums, logsumexp and softmax within a tolerance): exit status 1 and a message if they differ.
// The last line is a checksum of the variant's result, so nothing is optimised away. The script counts
// the instructions of two runs with reps 1 and 2 at two sizes: everything outside the `reps` loop (start-up,
// filling, the other variant, the check) cancels.
//
// "lib" calls the library's code directly on float arrays (no torch tensors): the reductions run
// cpu/chunk_reduce.h's reduce_whole_segments (the loop over a chunk's whole segments, which picks
// segment_sums.h, segment_extrema.h, reduce_piece.h / extremum_piece.h / exp_pass), over all segments as one
// chunk (the merge-path chunking around it is not measured); gather and softmax run kernels.cpp's
// expansions (expand_csr_rows, expand_csr, softmax_rows), which the script copies out of kernels.cpp into
// kernels_expansions.inc at build time (they live in its anonymous namespace, next to code that needs
// the torch stable ABI), with torch's parallel_for run serially on the calling thread.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "cpu/chunk_reduce.h"
#include "cpu/exp_lanes.h"
#include "cpu/vec_math.h"
#include "index_math.h"

// torch::stable::parallel_for's entry point into libtorch, here: the whole range on this thread.
extern "C" AOTITorchError torch_parallel_for(int64_t begin, int64_t end, int64_t, ParallelFunc func, void* ctx) {
  if (begin < end) func(begin, end, ctx);
  return TORCH_SUCCESS;
}

HWY_BEFORE_NAMESPACE();
namespace torch_segops {
namespace cpu {
namespace {
// What kernels.cpp's expansions read of their arguments (csr_args.h's CsrArgs holds torch tensors).
struct CsrArgs {
  int64_t B = 1, N = 0, S = 0, F = 1;
  const int64_t* indptr = nullptr;
  std::vector<int64_t> batch_offset{0};
};
template <typename T> const T* cptr(const int64_t* p) { return p; }

#include "kernels_expansions.inc"  // kernels.cpp, from "// ---- expansions" to "// ---- typed entry points"
}  // namespace
}  // namespace cpu
}  // namespace torch_segops

// The plain loops, and the rest of the driver, are compiled with the same target attributes as the
// library's code (HWY_BEFORE_NAMESPACE: "+crypto" on aarch64), so that vec_math.h's exp_approx inlines.

// ---- the counting method's check ---------------------------------------------------------------------

// A serial hash, one element per iteration, neither unrolled nor vectorised: the script reads its loop's
// instructions from the disassembly and expects exactly that many per iteration.
extern "C" [[gnu::noinline]] uint32_t segops_tiny_loop(const uint32_t* x, int64_t n) {
  uint32_t h = 2166136261u;
#if defined(__clang__)
#pragma clang loop unroll(disable) vectorize(disable)
#else
#pragma GCC unroll 1
#endif
  for (int64_t i = 0; i < n; ++i) h = (h ^ x[i]) * 16777619u;
  return h;
}

namespace {

using torch_segops::ArgExtremumOp;
using torch_segops::LogSumExpOp;
using torch_segops::StateResult;
using torch_segops::SumOp;
namespace cpu = torch_segops::cpu;
using LseState = LogSumExpOp<float>::State;

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

struct Problem {
  int64_t S = 0, L = 0, F = 1, N = 0;  // segments, rows per segment, features, rows
  std::vector<int64_t> indptr;
  std::vector<float> x;  // [N, F]; gather: [S, F]
};

// Results: values (and rows of min/max, or the softmax stats' sums).
struct Result {
  std::vector<float> v;
  std::vector<int64_t> arg;
};

// ---- the library's code ------------------------------------------------------------------------------

// Op over every segment as one chunk: what chunk_reduce.h's reduce_chunks runs for the segments wholly
// inside a chunk (one feature: state in a register, kFn = 1).
template <class Op, class OutT>
[[gnu::noinline]] void lib_reduce(const Problem& pr, OutT* out, int64_t* arg) {
  const cpu::ArrayLoad<float> load{pr.x.data(), static_cast<int64_t>(pr.x.size())};
  const cpu::Outputs<OutT> o{out, arg, pr.S, 0, pr.N};
  if (pr.F == 1) {
    typename Op::State one[1];
    cpu::reduce_whole_segments<Op, 1>(one, load, 0, pr.indptr.data(), 0, pr.S, 0, 0, 1, 0, 1, o, cpu::SamePosition{});
  } else {
    std::vector<typename Op::State> st(static_cast<size_t>(pr.F));
    cpu::reduce_whole_segments<Op, 0>(st.data(), load, 0, pr.indptr.data(), 0, pr.S, 0, 0, pr.F, 0, pr.F, o,
                                      cpu::SamePosition{});
  }
}

cpu::CsrArgs csr_args(const Problem& pr) {
  cpu::CsrArgs a;
  a.N = pr.N, a.S = pr.S, a.F = pr.F, a.indptr = pr.indptr.data();
  return a;
}

// kernels.cpp's softmax_kernel for float: the stats (max, sum of exp(x - max)) by the reduction, then the
// rows by softmax_rows.
[[gnu::noinline]] void lib_softmax(const Problem& pr, float* out, LseState* stats) {
  using Stats = StateResult<LogSumExpOp<float>>;
  lib_reduce<Stats>(pr, stats, nullptr);
  const cpu::CsrArgs a = csr_args(pr);
  const float* x = pr.x.data();
  const LseState* st = stats;
  cpu::expand_csr_rows(a, a.N, out, [&](float* ob, const int64_t* p, int64_t lo, int64_t hi, int64_t b) {
    cpu::softmax_rows(ob, x, st, p, lo, hi, b, a.N, a.S, a.F);
  });
}

// kernels.cpp's gather_kernel for float: x is [S, F], out [N, F].
[[gnu::noinline]] void lib_gather(const Problem& pr, float* out) {
  const cpu::CsrArgs a = csr_args(pr);
  const float* x = pr.x.data();
  cpu::expand_csr_rows(a, a.N, out, [&](float* o, const int64_t* p, int64_t lo, int64_t hi, int64_t b) {
    cpu::gather_rows(o, x, p, lo, hi, b, a.S, a.F);
  });
}

// ---- plain loops -------------------------------------------------------------------------------------
// The same results as simple loops: features innermost (the loop a compiler vectorises), branch-free
// selects, the library's NaN rules; one feature as its own loop over rows.

[[gnu::noinline]] void plain_sum(const Problem& pr, float* out) {
  const int64_t F = pr.F;
  const int64_t* p = pr.indptr.data();
  const float* x = pr.x.data();
  if (F == 1) {
    for (int64_t s = 0; s < pr.S; ++s) {
      float acc = 0.f;
      for (int64_t r = p[s]; r < p[s + 1]; ++r) acc += x[r];
      out[s] = acc;
    }
    return;
  }
  for (int64_t s = 0; s < pr.S; ++s) {
    float* o = out + s * F;
    for (int64_t f = 0; f < F; ++f) o[f] = 0.f;
    for (int64_t r = p[s]; r < p[s + 1]; ++r) {
      const float* xr = x + r * F;
      for (int64_t f = 0; f < F; ++f) o[f] += xr[f];
    }
  }
}

// Min/max with the first row holding it (the first NaN where there is one); an empty segment: 0 and N.
template <bool kIsMax>
[[gnu::noinline]] void plain_arg_extremum(const Problem& pr, float* out, int64_t* arg) {
  const int64_t F = pr.F;
  const int64_t* p = pr.indptr.data();
  const float* x = pr.x.data();
  if (F == 1) {
    for (int64_t s = 0; s < pr.S; ++s) {
      const int64_t lo = p[s], hi = p[s + 1];
      float m = lo < hi ? x[lo] : 0.f;
      int64_t a = lo < hi ? lo : pr.N;
      for (int64_t r = lo + 1; r < hi; ++r) {
        const float v = x[r];
        const bool take = ((kIsMax ? v > m : v < m) || v != v) && m == m;
        m = take ? v : m;
        a = take ? r : a;
      }
      out[s] = m, arg[s] = a;
    }
    return;
  }
  for (int64_t s = 0; s < pr.S; ++s) {
    const int64_t lo = p[s], hi = p[s + 1];
    float* o = out + s * F;
    int64_t* a = arg + s * F;
    for (int64_t f = 0; f < F; ++f) o[f] = lo < hi ? x[lo * F + f] : 0.f, a[f] = lo < hi ? lo : pr.N;
    for (int64_t r = lo + 1; r < hi; ++r) {
      const float* xr = x + r * F;
      for (int64_t f = 0; f < F; ++f) {
        const float v = xr[f], m = o[f];
        const bool take = ((kIsMax ? v > m : v < m) || v != v) && m == m;
        o[f] = take ? v : m;
        a[f] = take ? r : a[f];
      }
    }
  }
}

// Per segment and feature: m = the max (NaN wins), s = the sum of exp(x - m) (x == m counts 1), with
// vec_math.h's exp_approx (plain C++, written for the vectoriser). m and s are [S, F].
void plain_lse_stats(const Problem& pr, float* m, float* sum) {
  const int64_t F = pr.F;
  const int64_t* p = pr.indptr.data();
  const float* x = pr.x.data();
  for (int64_t s = 0; s < pr.S; ++s) {
    const int64_t lo = p[s], hi = p[s + 1];
    float* ms = m + s * F;
    float* ss = sum + s * F;
    for (int64_t f = 0; f < F; ++f) ms[f] = -kInf, ss[f] = 0.f;
    for (int64_t r = lo; r < hi; ++r) {
      const float* xr = x + r * F;
      for (int64_t f = 0; f < F; ++f) {
        const float v = xr[f];
        ms[f] = v > ms[f] || v != v ? v : ms[f];
      }
    }
    for (int64_t r = lo; r < hi; ++r) {
      const float* xr = x + r * F;
      for (int64_t f = 0; f < F; ++f) {
        const float v = xr[f];
        ss[f] += v == ms[f] ? 1.f : cpu::exp_approx(v - ms[f]);
      }
    }
  }
}

[[gnu::noinline]] void plain_lse(const Problem& pr, float* out, float* sums) {
  plain_lse_stats(pr, out, sums);
  const int64_t F = pr.F;
  for (int64_t s = 0; s < pr.S; ++s) {
    const bool empty = pr.indptr[s + 1] == pr.indptr[s];
    for (int64_t f = 0; f < F; ++f) out[s * F + f] = empty ? 0.f : out[s * F + f] + std::log(sums[s * F + f]);
  }
}

[[gnu::noinline]] void plain_softmax(const Problem& pr, float* out, float* m, float* sums) {
  plain_lse_stats(pr, m, sums);
  const int64_t F = pr.F;
  const int64_t* p = pr.indptr.data();
  const float* x = pr.x.data();
  for (int64_t s = 0; s < pr.S; ++s) {
    const float* ms = m + s * F;
    const float* ss = sums + s * F;
    for (int64_t r = p[s]; r < p[s + 1]; ++r) {
      const float* xr = x + r * F;
      float* o = out + r * F;
      for (int64_t f = 0; f < F; ++f) o[f] = ms[f] == kInf ? kNaN : cpu::exp_approx(xr[f] - ms[f]) / ss[f];
    }
  }
}

[[gnu::noinline]] void plain_gather(const Problem& pr, float* out) {
  const int64_t F = pr.F;
  const int64_t* p = pr.indptr.data();
  const float* x = pr.x.data();
  if (F == 1) {
    for (int64_t s = 0; s < pr.S; ++s) {
      for (int64_t r = p[s]; r < p[s + 1]; ++r) out[r] = x[s];
    }
    return;
  }
  for (int64_t s = 0; s < pr.S; ++s) {
    const float* xs = x + s * F;
    for (int64_t r = p[s]; r < p[s + 1]; ++r) {
      for (int64_t f = 0; f < F; ++f) out[r * F + f] = xs[f];
    }
  }
}

// ---- driver ------------------------------------------------------------------------------------------

uint64_t g_rng = 0x9e3779b97f4a7c15ull;
float next_float() {  // xorshift64*: 24 random bits -> [-4, 4)
  g_rng ^= g_rng >> 12, g_rng ^= g_rng << 25, g_rng ^= g_rng >> 27;
  const uint64_t u = g_rng * 0x2545f4914f6cdd1dull;
  return static_cast<float>(u >> 40) * (8.f / 16777216.f) - 4.f;
}

[[noreturn]] void usage(const char* msg) {
  std::fprintf(stderr, "aarch64_insns: %s\nusage: aarch64_insns <sum|max|min|lse|softmax|gather|tiny> <lib|plain> "
                       "<segments> <rows per segment> <features> <reps>\n", msg);
  std::exit(2);
}

bool near(float a, float b, float tol) { return std::fabs(a - b) <= tol || (a != a && b != b); }

// Every call is made again, whole: the compiler must assume that the memory p points to was read and changed
// before each call (without this GCC merged the repeated calls of segops_tiny_loop, which it found pure, and
// clang dropped them even behind a plain memory clobber, the input's pointer not having escaped).
inline void escape(const void* p) { asm volatile("" : : "r"(p) : "memory"); }

// Runs the variant `reps` times (each result written whole), then the other one once; fills the
// chosen variant's result.
struct Runner {
  bool lib;
  const Problem& pr;
  int64_t reps;

  template <class Lib, class Plain>
  void both(Result& mine, Result& other, const Lib& run_lib, const Plain& run_plain) {
    for (int64_t k = 0; k < reps; ++k) {
      for (const void* p : {static_cast<const void*>(pr.x.data()), static_cast<const void*>(pr.indptr.data()),
                            static_cast<const void*>(mine.v.data()), static_cast<const void*>(mine.arg.data())})
        escape(p);
      lib ? run_lib(mine) : run_plain(mine);
    }
    lib ? run_plain(other) : run_lib(other);
  }
};

int fail_at(const char* what, int64_t i, double a, double b) {
  std::fprintf(stderr, "aarch64_insns: lib and plain differ: %s[%lld]: %.9g vs %.9g\n", what,
               static_cast<long long>(i), a, b);
  return 1;
}

}  // namespace
HWY_AFTER_NAMESPACE();

int main(int argc, char** argv) {
  if (argc != 7) usage("expected 6 arguments");
  const std::string op = argv[1], variant = argv[2];
  if (variant != "lib" && variant != "plain") usage("variant must be lib or plain");
  Problem pr;
  pr.S = std::atoll(argv[3]), pr.L = std::atoll(argv[4]), pr.F = std::atoll(argv[5]);
  const int64_t reps = std::atoll(argv[6]);
  if (pr.S < 1 || pr.L < 0 || pr.F < 1 || reps < 1) usage("segments, features and reps must be >= 1");
  if (pr.F > cpu::kMaxPieceFeatures) usage("at most kMaxPieceFeatures features (one feature tile)");

  if (op == "tiny") {
    std::vector<uint32_t> x(static_cast<size_t>(pr.S));
    for (auto& v : x) v = static_cast<uint32_t>(next_float() * 1e6f);
    uint32_t h = 0;
    for (int64_t k = 0; k < reps; ++k) {
      escape(x.data());
      h = segops_tiny_loop(x.data(), pr.S);  // the same output whatever reps: its printing cancels too
      asm volatile("" : "+r"(h));
    }
    std::printf("checksum %u\n", h);
    return 0;
  }

  pr.N = pr.S * pr.L;
  pr.indptr.resize(static_cast<size_t>(pr.S + 1));
  for (int64_t s = 0; s <= pr.S; ++s) pr.indptr[s] = s * pr.L;
  const int64_t in_rows = op == "gather" ? pr.S : pr.N;
  pr.x.resize(static_cast<size_t>(in_rows * pr.F));
  for (auto& v : pr.x) v = next_float();

  const int64_t SF = pr.S * pr.F, NF = pr.N * pr.F;
  Result mine, other;
  Result* lib_res = variant == "lib" ? &mine : &other;
  Result* plain_res = variant == "lib" ? &other : &mine;
  Runner run{variant == "lib", pr, reps};
  int rc = 0;
  if (op == "sum") {
    for (Result* r : {&mine, &other}) r->v.assign(static_cast<size_t>(SF), 0.f);
    run.both(mine, other, [&](Result& r) { lib_reduce<SumOp<float>>(pr, r.v.data(), nullptr); },
             [&](Result& r) { plain_sum(pr, r.v.data()); });
    for (int64_t s = 0; s < pr.S && rc == 0; ++s) {
      for (int64_t f = 0; f < pr.F && rc == 0; ++f) {
        double mag = 0;  // the sum's error bound scales with the sum of magnitudes
        for (int64_t r = pr.indptr[s]; r < pr.indptr[s + 1]; ++r) mag += std::fabs(pr.x[r * pr.F + f]);
        const int64_t i = s * pr.F + f;
        if (!near(lib_res->v[i], plain_res->v[i], static_cast<float>(1e-6 * pr.L * mag + 1e-30)))
          rc = fail_at("sum", i, lib_res->v[i], plain_res->v[i]);
      }
    }
  } else if (op == "max" || op == "min") {
    for (Result* r : {&mine, &other}) {
      r->v.assign(static_cast<size_t>(SF), 0.f);
      r->arg.assign(static_cast<size_t>(SF), -1);
    }
    if (op == "max") {
      run.both(mine, other, [&](Result& r) { lib_reduce<ArgExtremumOp<float, true>>(pr, r.v.data(), r.arg.data()); },
               [&](Result& r) { plain_arg_extremum<true>(pr, r.v.data(), r.arg.data()); });
    } else {
      run.both(mine, other, [&](Result& r) { lib_reduce<ArgExtremumOp<float, false>>(pr, r.v.data(), r.arg.data()); },
               [&](Result& r) { plain_arg_extremum<false>(pr, r.v.data(), r.arg.data()); });
    }
    for (int64_t i = 0; i < SF && rc == 0; ++i) {
      if (std::memcmp(&lib_res->v[i], &plain_res->v[i], sizeof(float)) != 0) {
        rc = fail_at("value", i, lib_res->v[i], plain_res->v[i]);
      } else if (lib_res->arg[i] != plain_res->arg[i]) {
        rc = fail_at("arg", i, static_cast<double>(lib_res->arg[i]), static_cast<double>(plain_res->arg[i]));
      }
    }
  } else if (op == "lse") {
    for (Result* r : {&mine, &other}) r->v.assign(static_cast<size_t>(SF), 0.f);
    std::vector<float> sums(static_cast<size_t>(SF));
    run.both(mine, other, [&](Result& r) { lib_reduce<LogSumExpOp<float>>(pr, r.v.data(), nullptr); },
             [&](Result& r) { plain_lse(pr, r.v.data(), sums.data()); });
    for (int64_t i = 0; i < SF && rc == 0; ++i) {
      const float b = plain_res->v[i];
      if (!near(lib_res->v[i], b, 1e-5f * std::fmax(1.f, std::fabs(b)))) rc = fail_at("logsumexp", i, lib_res->v[i], b);
    }
  } else if (op == "softmax") {
    for (Result* r : {&mine, &other}) r->v.assign(static_cast<size_t>(NF), 0.f);
    std::vector<LseState> stats(static_cast<size_t>(SF));
    std::vector<float> m(static_cast<size_t>(SF)), sums(static_cast<size_t>(SF));
    run.both(mine, other, [&](Result& r) { lib_softmax(pr, r.v.data(), stats.data()); },
             [&](Result& r) { plain_softmax(pr, r.v.data(), m.data(), sums.data()); });
    for (int64_t i = 0; i < NF && rc == 0; ++i) {
      const float b = plain_res->v[i];
      if (!near(lib_res->v[i], b, 1e-5f * std::fabs(b) + 1e-7f)) rc = fail_at("softmax", i, lib_res->v[i], b);
    }
  } else if (op == "gather") {
    for (Result* r : {&mine, &other}) r->v.assign(static_cast<size_t>(NF), 0.f);
    run.both(mine, other, [&](Result& r) { lib_gather(pr, r.v.data()); },
             [&](Result& r) { plain_gather(pr, r.v.data()); });
    for (int64_t i = 0; i < NF && rc == 0; ++i) {
      if (std::memcmp(&lib_res->v[i], &plain_res->v[i], sizeof(float)) != 0) {
        rc = fail_at("gather", i, lib_res->v[i], plain_res->v[i]);
      }
    }
  } else {
    usage("unknown op");
  }
  double checksum = 0;
  for (float v : mine.v) checksum += v;
  for (int64_t a : mine.arg) checksum += static_cast<double>(a);
  std::printf("%s %s S=%lld L=%lld F=%lld reps=%lld checksum %.9g %s\n", op.c_str(), variant.c_str(),
              static_cast<long long>(pr.S), static_cast<long long>(pr.L), static_cast<long long>(pr.F),
              static_cast<long long>(reps), checksum, rc == 0 ? "ok" : "MISMATCH");
  return rc;
}
