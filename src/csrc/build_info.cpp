// What this binary is, for torch_segops.build_info() and the doctor: read through ctypes, no torch needed.
#include "cpu_isa_list.h"  // generated: TORCH_SEGOPS_CPU_ISAS
#include "platform.h"

#ifndef TORCH_SEGOPS_CUDA_VERSION
#define TORCH_SEGOPS_CUDA_VERSION ""
#endif
#ifndef TORCH_SEGOPS_CUDA_ARCHS
#define TORCH_SEGOPS_CUDA_ARCHS ""
#endif
#ifndef TORCH_SEGOPS_TORCH_HEADERS
#define TORCH_SEGOPS_TORCH_HEADERS ""
#endif

#define TORCH_SEGOPS_STR2(x) #x
#define TORCH_SEGOPS_STR(x) TORCH_SEGOPS_STR2(x)

extern "C" SEGOPS_EXPORT const char* torch_segops_build_info() {
  // A flat JSON object; cuda_archs is the CMake architecture list ("75-real;90-real;120"), "" for cpu.
  return "{"
         "\"version\": \"" TORCH_SEGOPS_VERSION "\", "
#ifdef TORCH_SEGOPS_WITH_CUDA
         "\"variant\": \"cuda\", "
#else
         "\"variant\": \"cpu\", "
#endif
         "\"cuda_version\": \"" TORCH_SEGOPS_CUDA_VERSION "\", "
         "\"cuda_archs\": \"" TORCH_SEGOPS_CUDA_ARCHS "\", "
         "\"cpu_isas\": \"" TORCH_SEGOPS_CPU_ISAS "\", "
         "\"torch_target\": \"" TORCH_SEGOPS_TORCH_TARGET "\", "
         "\"torch_headers\": \"" TORCH_SEGOPS_TORCH_HEADERS "\", "
         "\"cxx_compiler\": \"" SEGOPS_COMPILER_VERSION "\""
         "}";
}

// ---- the CUDA reduction plans a call may use (cuda_plans.h) ---------------------------------------------
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>

#include "cuda_plans.h"

namespace torch_segops {
namespace {
std::mutex g_plans_mu;
bool g_plans_read = false;
unsigned g_plans = kAllPlans;
std::string g_plans_error;  // an invalid TORCH_SEGOPS_CUDA_PLANS, until set_cuda_plans() replaces it

void read_env_once() {  // (g_plans_mu held)
  if (g_plans_read) return;
  g_plans_read = true;
  const char* env = std::getenv(kPlansEnv);
  unsigned m = kAllPlans;
  if (env != nullptr && !parse_plans(env, m, g_plans_error, kPlansEnv)) m = 0;
  g_plans = m;
}

void copy_out(const std::string& s, char* buf, size_t len) {
  if (buf == nullptr || len == 0) return;
  const size_t n = s.size() < len - 1 ? s.size() : len - 1;
  std::memcpy(buf, s.data(), n);
  buf[n] = '\0';
}
}  // namespace

unsigned allowed_cuda_plans(std::string* error) {
  std::lock_guard<std::mutex> lock(g_plans_mu);
  read_env_once();
  if (g_plans == 0 && error != nullptr) *error = g_plans_error;
  return g_plans;
}
}  // namespace torch_segops

// torch_segops.cuda_plans(): the allowed plans ("short,merge,block") into buf; returns 0, or 1 with the error
// of an invalid TORCH_SEGOPS_CUDA_PLANS in buf.
extern "C" SEGOPS_EXPORT int torch_segops_cuda_plans(char* buf, size_t len) {
  std::string err;
  const unsigned m = torch_segops::allowed_cuda_plans(&err);
  torch_segops::copy_out(m != 0 ? torch_segops::plans_spec(m) : err, buf, len);
  return m != 0 ? 0 : 1;
}

// torch_segops.set_cuda_plans(spec): returns 0, or 1 with the error in buf (the setting is then unchanged).
extern "C" SEGOPS_EXPORT int torch_segops_set_cuda_plans(const char* spec, char* buf,
                                                                                   size_t len) {
  unsigned m = 0;
  std::string err;
  if (!torch_segops::parse_plans(spec, m, err, "torch_segops.set_cuda_plans")) {
    torch_segops::copy_out(err, buf, len);
    return 1;
  }
  std::lock_guard<std::mutex> lock(torch_segops::g_plans_mu);
  torch_segops::g_plans_read = true;
  torch_segops::g_plans = m;
  torch_segops::g_plans_error.clear();
  return 0;
}

// How many CUDA reductions ran on each plan (ReducePlanKind order) since the library was loaded: the GPU tests
// check that a forced plan is the one that ran. Returns the number of counters written.
namespace torch_segops {
namespace {
std::atomic<unsigned long long> g_plan_counts[kPlanKinds];
}
void count_cuda_plan(int kind) {
  if (kind >= 0 && kind < kPlanKinds) g_plan_counts[kind].fetch_add(1, std::memory_order_relaxed);
}
}  // namespace torch_segops

extern "C" SEGOPS_EXPORT int torch_segops_cuda_plan_counts(unsigned long long* out, int n) {
  int k = 0;
  for (; k < n && k < torch_segops::kPlanKinds; ++k) out[k] = torch_segops::g_plan_counts[k].load();
  return k;
}
