#!/bin/bash
# Shared by recipe.yaml (rattler-build) and meta.yaml (conda-build), on linux and osx; build.bat is the
# same steps for Windows.
set -euxo pipefail

if [[ "${cuda_compiler_version:-None}" != "None" ]]; then
    export TORCH_SEGOPS_WITH_CUDA=ON
    # The architectures come from cmake/cuda_architectures.txt (the project's single list), unless the
    # packager passed CUDAARCHS to the build (it arrives renamed, as TORCH_SEGOPS_CUDAARCHS). The
    # CUDAARCHS that conda-forge's cuda-nvcc activation exports (every arch nvcc knows) must not win.
    if [[ -n "${TORCH_SEGOPS_CUDAARCHS:-}" ]]; then
        export CUDAARCHS="${TORCH_SEGOPS_CUDAARCHS}"
    else
        unset CUDAARCHS
    fi
fi

# __FILE__ in torch's headers and in our checks would otherwise embed the build paths in _C.so.
# CMakeLists.txt maps the source tree and torch's folder for every build; here the whole host prefix too.
map="-ffile-prefix-map=${SRC_DIR}=/usr/local/src/conda/${PKG_NAME}-${PKG_VERSION} -ffile-prefix-map=${PREFIX}=/usr/local/src/conda-prefix"
export CXXFLAGS="${CXXFLAGS:-} ${map}"
export CUDAFLAGS="${CUDAFLAGS:-} $(printf -- '-Xcompiler=%s ' ${map})"

# Google Highway from the host environment (libhwy), never downloaded (cmake/highway.cmake); _C.so, installed
# in lib/pythonX.Y/site-packages/torch_segops, finds libhwy in the environment's lib (recipe.yaml allow-lists it)
export TORCH_SEGOPS_HWY=system
if [[ "${target_platform}" == osx-* ]]; then
    export TORCH_SEGOPS_INSTALL_RPATH='@loader_path/../../..'
else
    export TORCH_SEGOPS_INSTALL_RPATH='$ORIGIN/../../..'
fi

export CMAKE_GENERATOR=Ninja
export CMAKE_BUILD_PARALLEL_LEVEL="${CPU_COUNT:-2}"

# torch comes from the host environment; pip must neither resolve nor download anything.
"${PYTHON}" -m pip install . --no-deps --no-build-isolation -vv

# pip records the local source folder (a build path) in direct_url.json
dist_info=("${SP_DIR}"/torch_segops-*.dist-info)
rm -f "${dist_info[0]}/direct_url.json"
# (-i.bak: the form both GNU sed and macOS's BSD sed accept)
sed -i.bak '/direct_url.json/d' "${dist_info[0]}/RECORD"
rm -f "${dist_info[0]}/RECORD.bak"
