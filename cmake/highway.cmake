# Google Highway (github.com/google/highway): the SIMD library of the CPU kernels (one source per kernel
# family, compiled for every instruction-set target; run-time dispatch with Highway's CPU detection,
# which lives in its library, libhwy). Defines TORCH_SEGOPS_HWY_LIB, the target to link.
#
# TORCH_SEGOPS_HWY selects where it comes from:
#   auto    (default) the installed Highway if CMake finds its package `hwy` >= 1.0.3 (Debian/Ubuntu
#           libhwy-dev, conda-forge libhwy, Homebrew/vcpkg highway; CMAKE_PREFIX_PATH or hwy_DIR point
#           at others), else its release source as `source` does;
#   system  the installed Highway only;
#   source  its release source, built here as a static library (position-independent, symbols hidden)
#           and linked into _C.so: a binary that needs no libhwy where it is installed (a wheel for other
#           machines). TORCH_SEGOPS_HWY_SOURCE_DIR names an unpacked release; otherwise the release
#           archive is downloaded from TORCH_SEGOPS_HWY_URL and checked against TORCH_SEGOPS_HWY_SHA256.
# Without the installed library and without the download, configuring stops with a message saying how
# to install it.
set(TORCH_SEGOPS_HWY "auto" CACHE STRING "Google Highway: auto (installed, else source), system, source")
set_property(CACHE TORCH_SEGOPS_HWY PROPERTY STRINGS auto system source)
set(TORCH_SEGOPS_HWY_MIN_VERSION 1.0.3)
# The 1.3.0 release; the hash is also that of Debian's highway_1.3.0.orig.tar.gz (the same archive).
set(TORCH_SEGOPS_HWY_URL "https://github.com/google/highway/archive/refs/tags/1.3.0.tar.gz"
    CACHE STRING "Google Highway release archive (TORCH_SEGOPS_HWY=source)")
set(TORCH_SEGOPS_HWY_SHA256 "07b3c1ba2c1096878a85a31a5b9b3757427af963b1141ca904db2f9f4afe0bc2"
    CACHE STRING "SHA-256 of TORCH_SEGOPS_HWY_URL's archive")
set(TORCH_SEGOPS_HWY_SOURCE_DIR "" CACHE PATH "An unpacked Google Highway release (TORCH_SEGOPS_HWY=source)")

if(NOT TORCH_SEGOPS_HWY MATCHES "^(auto|system|source)$")
  message(FATAL_ERROR "TORCH_SEGOPS_HWY=${TORCH_SEGOPS_HWY}: expected auto, system or source")
endif()

set(_hwy_help
  "Install Google Highway >= ${TORCH_SEGOPS_HWY_MIN_VERSION} (the CPU kernels' SIMD library), then build again:\n"
  "  Debian/Ubuntu:  apt-get install libhwy-dev\n"
  "  conda:          conda install -c conda-forge libhwy   (and build in that environment)\n"
  "  Fedora:         dnf install highway-devel\n"
  "  macOS:          brew install highway\n"
  "  vcpkg:          vcpkg install highway\n"
  "An installation CMake does not find: CMAKE_PREFIX_PATH=<its prefix>, or -Dhwy_DIR=<the folder of\n"
  "hwy-config.cmake> (pip: --config-settings=cmake.define.hwy_DIR=<folder>).\n"
  "Or build Highway from its release source, without a network: download\n"
  "  ${TORCH_SEGOPS_HWY_URL}\n"
  "  (SHA-256 ${TORCH_SEGOPS_HWY_SHA256}), unpack it and pass\n"
  "  -DTORCH_SEGOPS_HWY=source -DTORCH_SEGOPS_HWY_SOURCE_DIR=<the unpacked folder>.")

if(NOT TORCH_SEGOPS_HWY STREQUAL "source")
  # a conda build's host environment, as for torch
  set(_hwy_hints "")
  if(DEFINED ENV{PREFIX})
    list(APPEND _hwy_hints "$ENV{PREFIX}" "$ENV{PREFIX}/Library")
  endif()
  find_package(hwy ${TORCH_SEGOPS_HWY_MIN_VERSION} CONFIG QUIET HINTS ${_hwy_hints})
endif()

if(hwy_FOUND)
  set(TORCH_SEGOPS_HWY_LIB hwy::hwy)
  message(STATUS "torch_segops: Google Highway ${hwy_VERSION}, installed (${hwy_DIR})")
elseif(TORCH_SEGOPS_HWY STREQUAL "system")
  message(FATAL_ERROR "TORCH_SEGOPS_HWY=system: CMake found no package `hwy` >= ${TORCH_SEGOPS_HWY_MIN_VERSION}.\n" ${_hwy_help})
else()
  set(_hwy_src "${TORCH_SEGOPS_HWY_SOURCE_DIR}")
  if(NOT _hwy_src)
    set(_hwy_deps "${CMAKE_BINARY_DIR}/_deps/highway")
    set(_hwy_archive "${_hwy_deps}/highway.tar.gz")
    set(_hwy_ok FALSE)
    if(EXISTS "${_hwy_archive}")
      file(SHA256 "${_hwy_archive}" _hwy_have)
      if(_hwy_have STREQUAL TORCH_SEGOPS_HWY_SHA256)
        set(_hwy_ok TRUE)
      endif()
    endif()
    if(NOT _hwy_ok)
      message(STATUS "torch_segops: no installed Google Highway; downloading ${TORCH_SEGOPS_HWY_URL}")
      file(DOWNLOAD "${TORCH_SEGOPS_HWY_URL}" "${_hwy_archive}" STATUS _hwy_status TIMEOUT 300 INACTIVITY_TIMEOUT 30)
      list(GET _hwy_status 0 _hwy_code)
      list(GET _hwy_status 1 _hwy_why)
      if(NOT _hwy_code EQUAL 0)
        file(REMOVE "${_hwy_archive}")
        message(FATAL_ERROR
          "Google Highway was not found installed, and its release source could not be downloaded from\n"
          "  ${TORCH_SEGOPS_HWY_URL}: ${_hwy_why} (error ${_hwy_code}).\n" ${_hwy_help})
      endif()
      file(SHA256 "${_hwy_archive}" _hwy_have)
      if(NOT _hwy_have STREQUAL TORCH_SEGOPS_HWY_SHA256)
        file(REMOVE "${_hwy_archive}")
        message(FATAL_ERROR "${TORCH_SEGOPS_HWY_URL}: SHA-256 ${_hwy_have}, expected ${TORCH_SEGOPS_HWY_SHA256}.\n" ${_hwy_help})
      endif()
    endif()
    file(REMOVE_RECURSE "${_hwy_deps}/src")
    file(ARCHIVE_EXTRACT INPUT "${_hwy_archive}" DESTINATION "${_hwy_deps}/src")
    file(GLOB _hwy_src LIST_DIRECTORIES true "${_hwy_deps}/src/*")
  endif()
  if(NOT EXISTS "${_hwy_src}/hwy/targets.cc")
    message(FATAL_ERROR "${_hwy_src} holds no Google Highway release source (hwy/targets.cc).\n" ${_hwy_help})
  endif()
  # Highway's own build: the library alone, static and position-independent (it joins _C.so), its
  # symbols hidden (another libhwy in the process keeps its own).
  set(BUILD_SHARED_LIBS OFF)
  set(HWY_FORCE_STATIC_LIBS ON CACHE BOOL "" FORCE)
  foreach(_opt HWY_ENABLE_CONTRIB HWY_ENABLE_EXAMPLES HWY_ENABLE_INSTALL HWY_ENABLE_TESTS BUILD_TESTING)
    set(${_opt} OFF CACHE BOOL "" FORCE)
  endforeach()
  add_subdirectory("${_hwy_src}" "${CMAKE_BINARY_DIR}/_deps/highway-build" EXCLUDE_FROM_ALL)
  set_target_properties(hwy PROPERTIES POSITION_INDEPENDENT_CODE ON CXX_VISIBILITY_PRESET hidden
                                       VISIBILITY_INLINES_HIDDEN ON)
  set(TORCH_SEGOPS_HWY_LIB hwy)
  set(TORCH_SEGOPS_HWY_INCLUDE "${_hwy_src}")  # its headers as system headers (no warnings of ours)
  message(STATUS "torch_segops: Google Highway from source (${_hwy_src}), linked statically")
endif()
