// The CUDA reduction plans (cuda/segment_kernels.cuh, plan_reduce) and the process-wide choice of which a
// call may use: TORCH_SEGOPS_CUDA_PLANS (read at the first use) or torch_segops.set_cuda_plans(). Plain C++,
// no torch, no CUDA: the CPU build carries the setting too (build_info(), the doctor, the GPU tests' dry run),
// and the host emulation checks the parsing and the plan choice.
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
#include <string>

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

}  // namespace torch_segops
