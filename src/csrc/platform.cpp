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


}  // namespace platform
}  // namespace torch_segops
