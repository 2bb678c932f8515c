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

#include <cstdio>
#include <cstring>
#endif
#if defined(__clang__) && defined(__x86_64__)
#include <cpuid.h>
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

#if defined(__linux__)
// The first number of the line of `path` that starts with `key` (the whole file when key is ""), or -1.
static long long number_in(const char* path, const char* key) {
  FILE* f = std::fopen(path, "r");
  if (f == nullptr) return -1;
  char line[256];
  long long value = -1;
  const size_t n = std::strlen(key);
  while (std::fgets(line, sizeof line, f) != nullptr) {
    if (std::strncmp(line, key, n) == 0) {
      if (std::sscanf(line + n, " %lld", &value) != 1) value = -1;
      break;
    }
  }
  std::fclose(f);
  return value;
}
#endif

int64_t available_memory_bytes() {
#if defined(_WIN32)
  MEMORYSTATUSEX m;
  m.dwLength = sizeof m;
  return GlobalMemoryStatusEx(&m) ? static_cast<int64_t>(m.ullAvailPhys) : -1;
#elif defined(__linux__)
  const long long kib = number_in("/proc/meminfo", "MemAvailable:");
  if (kib < 0) return -1;
  long long bytes = kib * 1024;
  // cgroup v2 ("max": no limit, which %lld does not read)
  const long long limit = number_in("/sys/fs/cgroup/memory.max", ""), used = number_in("/sys/fs/cgroup/memory.current", "");
  if (limit > 0 && used >= 0 && limit - used < bytes) bytes = limit > used ? limit - used : 0;
  return static_cast<int64_t>(bytes);
#else
  return -1;
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

#if (defined(_M_X64) || defined(__x86_64__)) && !(defined(__GNUC__) && !defined(__clang__))
// cpuid leaf/subleaf into r (eax, ebx, ecx, edx), and the OS-enabled state mask (XCR0)
static void cpuid(int leaf, int sub, unsigned r[4]) {
#if defined(SEGOPS_MSVC)
  int v[4];
  __cpuidex(v, leaf, sub);
  for (int k = 0; k < 4; ++k) r[k] = static_cast<unsigned>(v[k]);
#else
  __cpuid_count(leaf, sub, r[0], r[1], r[2], r[3]);
#endif
}
static unsigned long long xcr0() {
#if defined(SEGOPS_MSVC)
  return _xgetbv(0);
#else
  unsigned lo, hi;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (static_cast<unsigned long long>(hi) << 32) | lo;
#endif
}
#endif

bool cpu_has_x86_64_v3() {
#if defined(__GNUC__) && !defined(__clang__) && (defined(__x86_64__) || defined(__i386__))
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c") &&
         __builtin_cpu_supports("bmi") && __builtin_cpu_supports("bmi2");
#elif defined(_M_X64) || defined(__x86_64__)
  // Clang (whose __builtin_cpu_supports lacks "f16c" before version 16) and MSVC: cpuid itself
  unsigned r[4];
  cpuid(0, 0, r);
  if (r[0] < 7) return false;
  cpuid(1, 0, r);
  const bool fma = r[2] >> 12 & 1, osxsave = r[2] >> 27 & 1, avx = r[2] >> 28 & 1, f16c = r[2] >> 29 & 1;
  if (!(fma && osxsave && avx && f16c) || (xcr0() & 0x6) != 0x6) return false;  // the OS saves XMM and YMM
  cpuid(7, 0, r);
  return (r[1] >> 3 & 1) && (r[1] >> 5 & 1) && (r[1] >> 8 & 1);  // BMI1, AVX2, BMI2
#else
  return false;
#endif
}

}  // namespace platform
}  // namespace torch_segops
