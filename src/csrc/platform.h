// The platform seam: every compiler- or OS-specific construct of the sources, with each platform's side.
// Compiler constructs are macros and inline functions here (nvcc includes this file); OS calls are
// out of line, in platform.cpp, so that no OS header reaches the other sources.
// tests/packaging/test_portability.py checks that the constructs it lists appear nowhere else.
#pragma once

#include <cstddef>
#include <cstdint>

#if defined(_MSC_VER) && !defined(__clang__)
#include <intrin.h>
#define SEGOPS_MSVC 1
#endif

// A function the library exports (read through ctypes); everything else is hidden.
#if defined(_WIN32)
#define SEGOPS_EXPORT __declspec(dllexport)
#else
#define SEGOPS_EXPORT __attribute__((visibility("default")))
#endif

#if defined(SEGOPS_MSVC)
#define SEGOPS_ALWAYS_INLINE __forceinline
#define SEGOPS_UNLIKELY(x) (x)
#else
#define SEGOPS_ALWAYS_INLINE __attribute__((always_inline)) inline
#define SEGOPS_UNLIKELY(x) __builtin_expect(!!(x), 0)
#endif

// The compiler, for build_info().
#if defined(SEGOPS_MSVC)
#define SEGOPS_PLATFORM_STR_(x) #x
#define SEGOPS_PLATFORM_STR(x) SEGOPS_PLATFORM_STR_(x)
#define SEGOPS_COMPILER_VERSION "MSVC " SEGOPS_PLATFORM_STR(_MSC_FULL_VER)
#else
#define SEGOPS_COMPILER_VERSION __VERSION__
#endif

namespace torch_segops {

// Index of the lowest set bit of x != 0.
SEGOPS_ALWAYS_INLINE int lowest_bit(uint32_t x) {
#if defined(SEGOPS_MSVC)
  unsigned long i;
  _BitScanForward(&i, x);
  return static_cast<int>(i);
#else
  return __builtin_ctz(x);
#endif
}

namespace platform {

// Asks the OS to back [p, p + bytes) with huge pages (Linux: madvise MADV_HUGEPAGE; elsewhere no
// equivalent for memory already allocated: nothing). Only a hint: never changes a value.
void advise_huge_pages(void* p, size_t bytes);

// The address of `name` in the already loaded libtorch_cpu (Linux: dlopen RTLD_NOLOAD + dlsym; macOS:
// the image holding torch's C shim, found with dladdr; Windows: GetModuleHandle + GetProcAddress),
// or nullptr.
void* torch_cpu_symbol(const char* name);

// Bytes of memory this process can still use without swapping or meeting a memory limit, as the OS tells
// (Linux: MemAvailable of /proc/meminfo, capped by the cgroup v2 limit this process is in; Windows: the
// available physical memory), or -1 where it cannot tell (macOS, a read failure).
int64_t available_memory_bytes();

}  // namespace platform
}  // namespace torch_segops
