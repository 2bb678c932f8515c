# CUDA backend of torch_segops: included by CMakeLists.txt when TORCH_SEGOPS_WITH_CUDA=ON.
#
# Architectures: the packager's choice wins (CUDAARCHS environment variable, as conda-forge's nvcc
# activation sets it, or -DCMAKE_CUDA_ARCHITECTURES=...); otherwise the row of
# cmake/cuda_architectures.txt for this nvcc (the single source of truth, see that file).
include("${CMAKE_CURRENT_LIST_DIR}/cuda_architectures.cmake")

# Did the packager choose? Decide before enable_language(CUDA), which fills in nvcc's own default.
# As in CMake, -DCMAKE_CUDA_ARCHITECTURES wins over CUDAARCHS. A value that we set ourselves on an
# earlier configure (remembered below) does not count as chosen.
if(DEFINED CMAKE_CUDA_ARCHITECTURES AND NOT "${CMAKE_CUDA_ARCHITECTURES}" STREQUAL ""
   AND NOT "${CMAKE_CUDA_ARCHITECTURES}" STREQUAL "${_TORCH_SEGOPS_DEFAULT_CUDA_ARCHS}")
  set(_segops_archs_source "CMAKE_CUDA_ARCHITECTURES")
elseif(DEFINED ENV{CUDAARCHS} AND NOT "$ENV{CUDAARCHS}" STREQUAL "")
  set(_segops_archs_source "CUDAARCHS environment variable")
  set(CMAKE_CUDA_ARCHITECTURES "$ENV{CUDAARCHS}" CACHE STRING "CUDA architectures (from CUDAARCHS)" FORCE)
else()
  set(_segops_archs_source "")
  unset(CMAKE_CUDA_ARCHITECTURES CACHE)
  unset(CMAKE_CUDA_ARCHITECTURES)
endif()

# Fail early, naming what this nvcc supports, instead of CMake's failed compiler test or an nvcc error per
# file. Runs before enable_language(CUDA) (which test-compiles for the chosen architectures), with the
# nvcc that CMake will pick: CMAKE_CUDA_COMPILER, $CUDACXX, or nvcc from $CUDA_HOME/$CUDA_PATH/PATH.
function(_torch_segops_check_archs archs source)
  set(_nvcc "${CMAKE_CUDA_COMPILER}")
  if(NOT _nvcc AND DEFINED ENV{CUDACXX})
    set(_nvcc "$ENV{CUDACXX}")
  endif()
  if(NOT _nvcc)
    find_program(_nvcc nvcc HINTS "$ENV{CUDA_HOME}/bin" "$ENV{CUDA_PATH}/bin" /usr/local/cuda/bin)
  endif()
  if(NOT _nvcc)
    return()
  endif()
  execute_process(COMMAND "${_nvcc}" --list-gpu-arch OUTPUT_VARIABLE _out RESULT_VARIABLE _rc ERROR_QUIET)
  if(NOT _rc EQUAL 0)
    return()
  endif()
  string(REGEX MATCHALL "compute_[0-9]+" _supported "${_out}")
  string(REPLACE "compute_" "" _supported "${_supported}")
  foreach(_a IN LISTS archs)
    string(REGEX MATCH "^[0-9]+" _num "${_a}")
    if(_num AND NOT _num IN_LIST _supported)
      string(REPLACE ";" " " _s "${_supported}")
      message(FATAL_ERROR
        "torch_segops: CUDA architecture '${_a}' (from ${source}) is not supported by ${_nvcc}, which "
        "supports: ${_s}. Set CUDAARCHS or -DCMAKE_CUDA_ARCHITECTURES to a list it supports.")
    endif()
  endforeach()
endfunction()
if(_segops_archs_source)
  _torch_segops_check_archs("${CMAKE_CUDA_ARCHITECTURES}" "${_segops_archs_source}")
endif()

# Link the CUDA runtime as a shared library, as torch wheels and conda-forge do.
set(CMAKE_CUDA_RUNTIME_LIBRARY Shared)
if(NOT DEFINED CMAKE_CUDA_STANDARD)
  set(CMAKE_CUDA_STANDARD 17)
  set(CMAKE_CUDA_STANDARD_REQUIRED ON)
endif()
enable_language(CUDA)
find_package(CUDAToolkit REQUIRED)

string(REGEX MATCH "^[0-9]+\\.[0-9]+" TORCH_SEGOPS_CUDA_VERSION "${CMAKE_CUDA_COMPILER_VERSION}")
if(NOT _segops_archs_source)
  torch_segops_default_cuda_architectures("${TORCH_SEGOPS_CUDA_VERSION}" _segops_default)
  if(NOT _segops_default)
    message(FATAL_ERROR
      "torch_segops: nvcc ${CMAKE_CUDA_COMPILER_VERSION} is older than every row of "
      "cmake/cuda_architectures.txt (CUDA >= 12.0 is supported). Use a newer CUDA toolkit or pass "
      "-DCMAKE_CUDA_ARCHITECTURES=... yourself.")
  endif()
  set(CMAKE_CUDA_ARCHITECTURES "${_segops_default}" CACHE STRING "CUDA architectures (torch_segops default for this nvcc)" FORCE)
  set(_TORCH_SEGOPS_DEFAULT_CUDA_ARCHS "${_segops_default}" CACHE INTERNAL "")
  set(_segops_archs_source "cmake/cuda_architectures.txt, row for nvcc ${TORCH_SEGOPS_CUDA_VERSION}")
endif()

# The concrete list for build_info(): CMake's special values expand to what CMake compiles for.
set(TORCH_SEGOPS_CUDA_ARCHS "${CMAKE_CUDA_ARCHITECTURES}")
if(CMAKE_CUDA_ARCHITECTURES STREQUAL "all" AND CMAKE_CUDA_ARCHITECTURES_ALL)
  set(TORCH_SEGOPS_CUDA_ARCHS "${CMAKE_CUDA_ARCHITECTURES_ALL}")
elseif(CMAKE_CUDA_ARCHITECTURES STREQUAL "all-major" AND CMAKE_CUDA_ARCHITECTURES_ALL_MAJOR)
  set(TORCH_SEGOPS_CUDA_ARCHS "${CMAKE_CUDA_ARCHITECTURES_ALL_MAJOR}")
elseif(CMAKE_CUDA_ARCHITECTURES STREQUAL "native" AND CMAKE_CUDA_ARCHITECTURES_NATIVE)
  set(TORCH_SEGOPS_CUDA_ARCHS "${CMAKE_CUDA_ARCHITECTURES_NATIVE}")
endif()

message(STATUS "torch_segops: CUDA ${CMAKE_CUDA_COMPILER_VERSION} (${CMAKE_CUDA_COMPILER}), architectures "
               "${TORCH_SEGOPS_CUDA_ARCHS} (from ${_segops_archs_source})")

# ---- sources and flags ---------------------------------------------------------------------------
target_sources(torch_segops_C PRIVATE "${PROJECT_SOURCE_DIR}/src/csrc/cuda/segment_cuda.cu"
                                     "${PROJECT_SOURCE_DIR}/src/csrc/cuda/coo_cuda.cu")
# The scatter ops' CUDA kernels (issue #38) are opt-in until a GPU has run them (docs/cuda.md, "Scatter"; they
# build for every architecture without a warning); without them scatter on CUDA takes the CSR route (torch.sort,
# gather, CSR ops).
option(TORCH_SEGOPS_CUDA_SCATTER "build the scatter ops' CUDA kernels (src/csrc/cuda/scatter_cuda.cu)" OFF)
if(TORCH_SEGOPS_CUDA_SCATTER)
  target_sources(torch_segops_C PRIVATE "${PROJECT_SOURCE_DIR}/src/csrc/cuda/scatter_cuda.cu")
endif()
# The target was created before CUDA was enabled: give it the final list explicitly.
set_target_properties(torch_segops_C PROPERTIES
  CUDA_ARCHITECTURES "${CMAKE_CUDA_ARCHITECTURES}"
  CUDA_VISIBILITY_PRESET hidden
  CUDA_RUNTIME_LIBRARY Shared)

# Fatbin compression: nvcc >= 12.8 has --compress-mode (size = smallest); older ones -compress-all.
set(TORCH_SEGOPS_CUDA_COMPRESS "size" CACHE STRING
    "Fatbin compression: size|balance|speed|default|none (nvcc >= 12.8), or all|none for older nvcc")
if(TORCH_SEGOPS_CUDA_COMPRESS STREQUAL "none")
  set(_segops_compress "$<$<VERSION_GREATER_EQUAL:${CMAKE_CUDA_COMPILER_VERSION},12.8>:--compress-mode=none>")
elseif(CMAKE_CUDA_COMPILER_VERSION VERSION_GREATER_EQUAL 12.8 AND NOT TORCH_SEGOPS_CUDA_COMPRESS STREQUAL "all")
  set(_segops_compress "--compress-mode=${TORCH_SEGOPS_CUDA_COMPRESS}")
else()
  set(_segops_compress "-Xfatbin=-compress-all")
endif()

# nvcc compiles the architectures of one file in parallel with --threads (0 = one per CPU).
set(TORCH_SEGOPS_NVCC_THREADS "0" CACHE STRING "nvcc --threads for the CUDA sources (0 = number of CPUs)")

string(REPLACE ";" "\\;" _segops_archs_define "${TORCH_SEGOPS_CUDA_ARCHS}")
target_compile_definitions(torch_segops_C PRIVATE
  TORCH_SEGOPS_WITH_CUDA
  "TORCH_SEGOPS_CUDA_VERSION=\"${TORCH_SEGOPS_CUDA_VERSION}\""
  "TORCH_SEGOPS_CUDA_ARCHS=\"${_segops_archs_define}\""
  # The CUDA parts of the stable C shim (aoti_torch_get_current_cuda_stream, ...) are declared under
  # USE_CUDA; only the .cu needs them.
  $<$<COMPILE_LANGUAGE:CUDA>:USE_CUDA>)
# Every nvcc warning is an error: a __host__ function called from __host__ __device__ code is only a warning
# (#20011-D), and nvcc then drops the call from the device code (a search loop compiled to nothing).
# (host compiler flags: GCC's; MSVC, Windows's host compiler, takes its defaults)
set(_segops_host_flags -Xcompiler=-Wall -Xcompiler=-fno-math-errno)
if(MSVC)
  set(_segops_host_flags "")
endif()
target_compile_options(torch_segops_C PRIVATE
  $<$<COMPILE_LANGUAGE:CUDA>:--expt-relaxed-constexpr --threads=${TORCH_SEGOPS_NVCC_THREADS} ${_segops_compress}
                             --Werror=all-warnings,cross-execution-space-call ${_segops_host_flags}>)

# ptxas's registers, stack frame, spills and shared memory per kernel in the build output
# (tools/check_cuda_build.py turns them into a table per kernel and architecture).
option(TORCH_SEGOPS_CUDA_RESOURCE_USAGE "Print ptxas resource usage per kernel" OFF)
if(TORCH_SEGOPS_CUDA_RESOURCE_USAGE)
  target_compile_options(torch_segops_C PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:--resource-usage>)
endif()

# ---- linking ---------------------------------------------------------------------------------------
# The CUDA shim symbols (aoti_torch_get_current_cuda_stream) live in libtorch_cuda.so, and _C.so must name
# it as NEEDED: torch loads its own libraries RTLD_LOCAL, so a symbol left undefined without that entry
# does not bind at load time ("undefined symbol: aoti_torch_get_current_cuda_stream", seen on a GPU).
# A CPU-only torch (CI's compile check) has no libtorch_cuda: link a stub of the same soname instead. It
# is never installed; at load time the soname matches the libtorch_cuda.so that a CUDA torch has loaded.
find_library(TORCH_SEGOPS_LIBTORCH_CUDA torch_cuda PATHS ${_torch_libs} NO_DEFAULT_PATH)
if(TORCH_SEGOPS_LIBTORCH_CUDA)
  target_link_libraries(torch_segops_C PRIVATE "${TORCH_SEGOPS_LIBTORCH_CUDA}")
else()
  message(STATUS "torch_segops: no libtorch_cuda in ${TORCH_SEGOPS_TORCH_DIR}/lib (CPU torch): linking a "
                 "libtorch_cuda.so stub; the library then loads only in a CUDA torch")
  set(_stub_dir "${CMAKE_CURRENT_BINARY_DIR}/torch_cuda_stub")
  file(WRITE "${_stub_dir}/torch_cuda_stub.cpp" "extern \"C\" int aoti_torch_get_current_cuda_stream(int, void**) { return 1; }\n")
  add_library(torch_segops_torch_cuda_stub SHARED "${_stub_dir}/torch_cuda_stub.cpp")
  set_target_properties(torch_segops_torch_cuda_stub PROPERTIES
    OUTPUT_NAME torch_cuda LIBRARY_OUTPUT_DIRECTORY "${_stub_dir}")
  add_dependencies(torch_segops_C torch_segops_torch_cuda_stub)
  # -L/-l, not a target or a path: CMake then adds no build RPATH that would find the stub at run time
  target_link_libraries(torch_segops_C PRIVATE "-L${_stub_dir}" torch_cuda)
endif()
target_link_libraries(torch_segops_C PRIVATE CUDA::cudart)
