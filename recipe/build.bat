:: Windows twin of build.sh (recipe.yaml and meta.yaml pick it on win): the same steps, in cmd.
:: MSVC has no -ffile-prefix-map: build paths in __FILE__ stay in _C.so on Windows (docs/conda.md).
@echo on
setlocal EnableExtensions

if not "%cuda_compiler_version%"=="None" (
    set "TORCH_SEGOPS_WITH_CUDA=ON"
    rem cmake/cuda_architectures.txt's list unless the packager passed CUDAARCHS (as TORCH_SEGOPS_CUDAARCHS);
    rem the CUDAARCHS of the nvcc activation must not win
    if defined TORCH_SEGOPS_CUDAARCHS (
        set "CUDAARCHS=%TORCH_SEGOPS_CUDAARCHS%"
    ) else (
        set "CUDAARCHS="
    )
)

:: Google Highway from the host environment (libhwy), never downloaded (cmake/highway.cmake)
set "TORCH_SEGOPS_HWY=system"

set "CMAKE_GENERATOR=Ninja"
set "CMAKE_BUILD_PARALLEL_LEVEL=%CPU_COUNT%"

:: torch comes from the host environment; pip must neither resolve nor download anything.
"%PYTHON%" -m pip install . --no-deps --no-build-isolation -vv
if errorlevel 1 exit /b 1

:: pip records the local source folder (a build path) in direct_url.json
for /d %%d in ("%SP_DIR%\torch_segops-*.dist-info") do (
    del /q "%%~d\direct_url.json"
    findstr /v /c:"direct_url.json" "%%~d\RECORD" > "%%~d\RECORD.new"
    move /y "%%~d\RECORD.new" "%%~d\RECORD"
    if errorlevel 1 exit /b 1
)
