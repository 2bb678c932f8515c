// The CUDA plans: which kernels run an op call with which geometry (plan_reduce, plan_expand: from the shapes
// and dtype only, never the GPU or the data, so the order of every floating-point operation is fixed), their
// tunables (Tuning), and the process-wide choice of which reduction plans a call may use:
// TORCH_SEGOPS_CUDA_PLANS (read at the first use) or torch_segops.set_cuda_plans(). Plain C++, no torch, no
// CUDA: the CPU build carries the setting too (build_info(), the doctor, the GPU tests' dry run), and the
// host emulation checks the parsing, the plan choice and the plans.
//
//   short  ReduceShort: lane groups own whole short segments; long segments in pieces (ReduceShortPieces,
//          piece levels, FinishLongSegments)
//   merge  the merge-path plan with ReduceMain (Partition, carries, levels, Fixup)
//   block  the merge-path plan with the one-feature block kernel ReduceFlatBlock (F == 1 only)
//
// A restricted set is a way around a plan that misbehaves on some GPU: "merge" runs every reduction on the
// merge-path plan. short and merge each handle every shape; block only one-feature inputs, so a set must hold
// short or merge.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>

#include "index_math.h"

namespace torch_segops {

enum ReducePlanKind : int { kPlanNone = 0, kPlanShort = 1, kPlanMerge = 2, kPlanBlock = 3 };  // None: nothing to reduce
constexpr int kPlanKinds = 4;
constexpr unsigned plan_bit(int kind) { return 1u << kind; }
constexpr unsigned kAllPlans = plan_bit(kPlanShort) | plan_bit(kPlanMerge) | plan_bit(kPlanBlock);
constexpr const char* kPlansEnv = "TORCH_SEGOPS_CUDA_PLANS";

inline const char* plan_name(int kind) {
  switch (kind) {
    case kPlanShort: return "short";
    case kPlanMerge: return "merge";
    case kPlanBlock: return "block";
    default: return "none";
  }
}

// The canonical spelling of a set: "short,merge,block" order, "" for none.
inline std::string plans_spec(unsigned mask) {
  std::string s;
  for (int k = kPlanShort; k <= kPlanBlock; ++k) {
    if (mask & plan_bit(k)) s += (s.empty() ? "" : ",") + std::string(plan_name(k));
  }
  return s;
}

// "short,merge" (any order, spaces ignored), "all" or "" (every plan) -> mask; on error false and a message
// that names `source` (the variable or function the spec came from).
inline bool parse_plans(const char* spec, unsigned& mask, std::string& error, const char* source) {
  unsigned m = 0;
  std::string s(spec == nullptr ? "" : spec), item;
  s.erase(std::remove(s.begin(), s.end(), ' '), s.end());
  if (s.empty() || s == "all") {
    mask = kAllPlans;
    return true;
  }
  for (size_t i = 0; i <= s.size(); ++i) {
    if (i < s.size() && s[i] != ',') {
      item += s[i];
      continue;
    }
    int k = kPlanNone;
    for (int c = kPlanShort; c <= kPlanBlock; ++c) {
      if (item == plan_name(c)) k = c;
    }
    if (k == kPlanNone) {
      error = std::string(source) + ": unknown CUDA reduction plan '" + item + "' in '" + spec +
              "'; the plans are short, merge and block (or all)";
      return false;
    }
    m |= plan_bit(k);
    item.clear();
  }
  if ((m & (plan_bit(kPlanShort) | plan_bit(kPlanMerge))) == 0) {
    error = std::string(source) + ": '" + spec +
            "' leaves no plan for inputs of more than one feature; add short or merge (block reduces one-feature "
            "inputs only)";
    return false;
  }
  mask = m;
  return true;
}

// The process-wide setting (build_info.cpp). On an invalid TORCH_SEGOPS_CUDA_PLANS, allowed_cuda_plans()
// returns 0 and sets *error; every CUDA reduction then raises it.
unsigned allowed_cuda_plans(std::string* error);
// Counts a CUDA reduction that ran on plan `kind` (torch_segops_cuda_plan_counts, for the GPU tests).
void count_cuda_plan(int kind);

namespace cuda {

// Levels of keyed partial states (carries, piece states) combined K at a time, at most.
constexpr int kMaxLevels = 8;

// Tunables. The plan depends only on shapes and dtype (never on the GPU), so results are reproducible.
struct Tuning {
  int64_t target_threads = int64_t(1) << 19;  // expansions: grow chunks until a launch has at most this many threads
  // merge-path reductions (ReduceMain): the same for pass 1. 2^18 threads are 2.6 waves of an H100 at 24
  // warps per SM; fewer, longer chunks mean fewer segment starts per group and fewer carries to fix up
  // (docs/cuda.md, "Tuning")
  int64_t reduce_threads = int64_t(1) << 18;
  int64_t reduce_w_min = 32, reduce_w_max = 256;
  int flat_items = 0;  // F == 1 (ReduceFlatBlock): merge items per thread; 0: the kernel's kItemsMax
  int64_t expand_w_min = 32, expand_work_max = 8192;  // expand: W * nfv <= this
  int64_t level_k = 64;                               // carries merged per group and level
  int64_t max_lanes = 64;                             // lanes sharing one reduction chunk
  int64_t validate_per_thread = 16;                   // offsets per thread of a standalone validation
  // Short-segment plan (ReduceShort): F > 1 and N <= short_avg_max * S (an average segment of at most that
  // many rows); a group of lanes then owns about short_rows rows' worth of whole segments.
  int64_t short_avg_max = 16, short_rows = 64;
  // ... and segments of more than short_long_rows rows are read in pieces of that many rows (ReduceShortPieces).
  int64_t short_long_rows = 256;
  unsigned plans = kAllPlans;  // the reduction plans allowed (above; must hold short or merge)
};

struct ReducePlan {
  int kind = kPlanNone;  // ReducePlanKind
  bool flat = false;
  bool short_segs = false;  // ReduceShort: groups own whole segments (Sg per group, gpb groups per batch)
  int64_t Sg = 0, gpb = 0;
  int64_t P = 0, ppb = 0;   // ReduceShortPieces: rows per piece, pieces per batch (0: no segment can be long)
  int V = 1;
  int64_t G = 1, tiles = 1, ft = 1, W = 1, cpb = 0, C = 0, main_threads = 0;
  int L = 1;
  int64_t n[kMaxLevels] = {};
};

// Levels of keyed partial states combined K at a time (LevelCarry): n0 entries at level 0.
inline void plan_levels(ReducePlan& pl, int64_t n0, int64_t K) {
  pl.n[0] = n0;
  pl.L = 1;
  while (pl.n[pl.L - 1] > K && pl.L < kMaxLevels) {
    pl.n[pl.L] = ceil_div(pl.n[pl.L - 1], K);
    ++pl.L;
  }
}

// vmax: elements per 16-byte vector of the input dtype; vec_ok: F % vmax == 0 and pointers aligned.
// Which plan reduces [B, N, F] rows into S segments: the one-feature block kernel for F == 1, short segments
// (at most short_avg_max rows on average), else the merge-path plan; among the plans t.plans allows (short and
// merge each handle every shape).
inline int choose_plan(int64_t N, int64_t S, int64_t F, const Tuning& t) {
  const bool can_short = (t.plans & plan_bit(kPlanShort)) != 0, can_merge = (t.plans & plan_bit(kPlanMerge)) != 0;
  if (F == 1 && (t.plans & plan_bit(kPlanBlock))) return kPlanBlock;
  if (can_short && (N <= t.short_avg_max * S || !can_merge)) return kPlanShort;
  return kPlanMerge;
}

inline ReducePlan plan_reduce(int64_t B, int64_t N, int64_t S, int64_t F, int vmax, bool vec_ok,
                              const Tuning& t = Tuning()) {
  ReducePlan pl;
  if (B == 0 || S == 0 || F == 0) return pl;  // nothing to reduce (validation still runs)
  pl.kind = choose_plan(N, S, F, t);
  pl.flat = pl.kind == kPlanBlock;
  pl.V = (!pl.flat && vec_ok && F % vmax == 0) ? vmax : 1;
  const int64_t nfv = F / pl.V;
  pl.G = pl.flat ? 1 : imin(nfv, t.max_lanes);
  pl.tiles = ceil_div(nfv, pl.G);
  pl.ft = pl.G * pl.V;
  if (pl.kind == kPlanShort) {
    pl.short_segs = true;
    // (at most short_rows segments: many empty segments still spread over many groups)
    pl.Sg = iclamp(ceil_div(t.short_rows * S, imax(N, 1)), 1, imax(1, t.short_rows));
    pl.gpb = ceil_div(S, pl.Sg);
    pl.main_threads = B * pl.gpb * pl.G * pl.tiles;
    pl.P = imax(1, t.short_long_rows);
    pl.ppb = N > pl.P ? ceil_div(N, pl.P) : 0;
    plan_levels(pl, B * pl.ppb, t.level_k);  // the pieces' slot-0 states
    return pl;
  }
  if (pl.flat) {
    pl.W = 256 * imax(1, t.flat_items);  // ReduceFlatBlock: kBlock threads of `items` items
  } else {
    pl.W = t.reduce_w_min;
    while (pl.W < t.reduce_w_max && B * ceil_div(S + N, pl.W) * pl.G * pl.tiles > t.reduce_threads) pl.W *= 2;
  }
  pl.cpb = ceil_div(S + N, pl.W);
  pl.C = B * pl.cpb;
  pl.main_threads = pl.C * (pl.flat ? 256 : pl.G * pl.tiles);
  plan_levels(pl, pl.C, t.level_k);  // the chunks' carries
  return pl;
}

struct ExpandPlan {
  int V = 1;
  int64_t nfv = 0, W = 1, cpb = 0, Wz = 0, C = 0, threads = 0;
};

inline ExpandPlan plan_expand(int64_t B, int64_t R, int64_t S, int64_t F, int vmax, bool vec_ok,
                              const Tuning& t = Tuning()) {
  ExpandPlan pl;
  if (B == 0 || R == 0 || F == 0) return pl;
  pl.V = (vec_ok && F % vmax == 0) ? vmax : 1;
  pl.nfv = F / pl.V;
  const int64_t w_max = imax(t.expand_w_min, t.expand_work_max / pl.nfv);
  pl.W = t.expand_w_min;
  while (pl.W < w_max && B * ceil_div(S + R, pl.W) * 32 > t.target_threads) pl.W *= 2;
  pl.cpb = ceil_div(S + R, pl.W);
  pl.Wz = ceil_div(R, pl.cpb);
  pl.C = B * pl.cpb;
  pl.threads = pl.C * 32;
  return pl;
}


}  // namespace cuda

}  // namespace torch_segops
