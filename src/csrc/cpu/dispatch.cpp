// The choice of the CPU kernel object (cpu/kernels.h): Highway's run-time detection of what this CPU and
// OS run (hwy::SupportedTargets: cpuid and xgetbv on x86, the auxiliary vector on Linux/aarch64), or the
// object TORCH_SEGOPS_CPU_ISA names.
#include <cctype>
#include <cstdint>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <vector>

#include <hwy/targets.h>

#include "cpu/kernels.h"
#include "platform.h"

namespace torch_segops {
namespace cpu {
// The compiled objects, lowest first (the baseline).
std::vector<const Kernels*> compiled() {
  std::vector<const Kernels*> out;
#define SEGOPS_ADD_KERNELS(isa) out.push_back(&kernels_##isa());
  SEGOPS_CPU_ISA_LIST(SEGOPS_ADD_KERNELS)
#undef SEGOPS_ADD_KERNELS
  return out;
}

namespace {

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::string join_names(const std::vector<const Kernels*>& ks) {
  std::string s;
  for (const Kernels* k : ks) s += (s.empty() ? "" : ", ") + std::string(k->isa);
  return s;
}

struct Choice {
  const Kernels* kernels = nullptr;
  std::string name, error;
};

Choice choose() {
  const std::vector<const Kernels*> all = compiled();
  const Kernels* baseline = all.front();  // every CPU of the build's architecture runs it
  const int64_t supported = hwy::SupportedTargets() | baseline->target;
  std::vector<const Kernels*> runnable;
  for (const Kernels* k : all) {
    if (supported & k->target) runnable.push_back(k);
  }
  Choice c;
  c.kernels = runnable.back();  // the objects are listed lowest first
  const char* env = std::getenv("TORCH_SEGOPS_CPU_ISA");
  if (env != nullptr && *env != '\0') {
    const std::string want = lower(env);
    const Kernels* named = nullptr;
    for (const Kernels* k : all) {
      if (want == k->isa) named = k;
    }
    const std::string head = std::string("TORCH_SEGOPS_CPU_ISA=") + env;
    if (named == nullptr) {
      c.error = head + " names no CPU kernel set of this build; it has: " + join_names(all);
    } else if (!(supported & named->target)) {
      c.error = head + ": this CPU cannot run the " + named->isa + " kernels; it runs: " + join_names(runnable);
    }
    c.kernels = named;
  }
  c.name = c.error.empty() ? c.kernels->isa : "invalid: " + c.error;
  return c;
}

const Choice& choice() {
  static const Choice c = choose();
  return c;
}

}  // namespace

const Kernels& kernels() {
  const Choice& c = choice();
  if (!c.error.empty()) throw std::runtime_error(c.error);
  return *c.kernels;
}

const char* chosen_isa() { return choice().name.c_str(); }

}  // namespace cpu
}  // namespace torch_segops

// The kernel set this process runs ("baseline", "avx2", or "invalid: ..."), for torch_segops.build_info()
// (ctypes: never throws).
extern "C" SEGOPS_EXPORT const char* torch_segops_cpu_isa() { return torch_segops::cpu::chosen_isa(); }

// Each compiled set's Highway target, "baseline=sse2,avx2=avx2,avx512=avx3" (Highway's names in lower case):
// what the baseline is depends on the Highway version and compiler the library was built with.
extern "C" SEGOPS_EXPORT const char* torch_segops_cpu_targets() {
  static const std::string names = [] {
    std::string s;
    for (const torch_segops::cpu::Kernels* k : torch_segops::cpu::compiled()) {
      s += (s.empty() ? "" : ",") + std::string(k->isa) + "=" + torch_segops::cpu::lower(hwy::TargetName(k->target));
    }
    return s;
  }();
  return names.c_str();
}
