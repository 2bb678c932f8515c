// What this binary is, for torch_segops.build_info() and the doctor: read through ctypes, no torch needed.
#ifndef TORCH_SEGOPS_CUDA_VERSION
#define TORCH_SEGOPS_CUDA_VERSION ""
#endif
#ifndef TORCH_SEGOPS_CUDA_ARCHS
#define TORCH_SEGOPS_CUDA_ARCHS ""
#endif
#ifndef TORCH_SEGOPS_CPU_ISAS
#define TORCH_SEGOPS_CPU_ISAS "baseline"
#endif
#ifndef TORCH_SEGOPS_TORCH_HEADERS
#define TORCH_SEGOPS_TORCH_HEADERS ""
#endif

#define TORCH_SEGOPS_STR2(x) #x
#define TORCH_SEGOPS_STR(x) TORCH_SEGOPS_STR2(x)

extern "C" __attribute__((visibility("default"))) const char* torch_segops_build_info() {
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
         "\"cxx_compiler\": \"" __VERSION__ "\""
         "}";
}
