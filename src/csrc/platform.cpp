// The OS side of the platform seam (platform.h): one implementation per platform, chosen here only.
#include "platform.h"

#if defined(_WIN32)
#ifndef WIN32_LEAN_AND_MEAN
#define WIN32_LEAN_AND_MEAN
#endif
#ifndef NOMINMAX
#define NOMINMAX
#endif
#include <windows.h>
#else
#include <dlfcn.h>
#endif
#if defined(__linux__)
#include <sys/mman.h>
#endif

#if defined(__APPLE__)
#include <torch/csrc/stable/c/shim.h>  // torch_call_dispatcher: an address in libtorch_cpu
#endif

namespace torch_segops {
namespace platform {

void advise_huge_pages(void* p, size_t bytes) {
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  constexpr uintptr_t kHuge = uintptr_t{2} << 20;
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  const uintptr_t lo = (a + kHuge - 1) & ~(kHuge - 1), hi = (a + bytes) & ~(kHuge - 1);
  if (hi > lo) (void)madvise(reinterpret_cast<void*>(lo), hi - lo, MADV_HUGEPAGE);  // failure (no THP): ignored
#else
  (void)p;
  (void)bytes;
#endif
}

void* torch_cpu_symbol(const char* name) {
#if defined(_WIN32)
  HMODULE lib = GetModuleHandleW(L"torch_cpu.dll");
  return lib ? reinterpret_cast<void*>(GetProcAddress(lib, name)) : nullptr;
#elif defined(__APPLE__)
  // an install name (@rpath/...) that dlopen cannot match by leaf name: find the image by an address in it
  Dl_info info;
  if (dladdr(reinterpret_cast<const void*>(&torch_call_dispatcher), &info) == 0 || info.dli_fname == nullptr) {
    return nullptr;
  }
  void* lib = dlopen(info.dli_fname, RTLD_LAZY | RTLD_NOLOAD);
  return lib ? dlsym(lib, name) : nullptr;
#else
  void* lib = dlopen("libtorch_cpu.so", RTLD_LAZY | RTLD_NOLOAD);  // already loaded: our NEEDED entry
  return lib ? dlsym(lib, name) : nullptr;
#endif
}

bool cpu_has_x86_64_v3() {
#if defined(SEGOPS_MSVC) && (defined(_M_X64) || defined(_M_IX86))
  int r[4];
  __cpuid(r, 0);
  if (r[0] < 7) return false;
  __cpuid(r, 1);
  const bool fma = r[2] & (1 << 12), osxsave = r[2] & (1 << 27), avx = r[2] & (1 << 28), f16c = r[2] & (1 << 29);
  if (!(fma && osxsave && avx && f16c)) return false;
  if ((_xgetbv(0) & 0x6) != 0x6) return false;  // the OS saves XMM and YMM state
  __cpuidex(r, 7, 0);
  const bool bmi1 = r[1] & (1 << 3), avx2 = r[1] & (1 << 5), bmi2 = r[1] & (1 << 8);
  return bmi1 && avx2 && bmi2;
#elif (defined(__GNUC__) || defined(__clang__)) && (defined(__x86_64__) || defined(__i386__))
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c") &&
         __builtin_cpu_supports("bmi") && __builtin_cpu_supports("bmi2");
#else
  return false;
#endif
}

}  // namespace platform
}  // namespace torch_segops
