"""The install facts the checks share (variant, CUDA version of the binary) and the commands they suggest."""

from __future__ import annotations

from .records import MIN_TORCH, SUGGESTED_CUDA, Facts


def _variant(f: Facts) -> str | None:
    return (f.build_info or {}).get("variant")


def _build_cuda(f: Facts) -> str | None:
    return (f.build_info or {}).get("cuda_version") or None


def _cuda_tag(cuda: str) -> str:
    return "cu" + cuda.replace(".", "")


def fix_cuda_torch(f: Facts, cuda: str = SUGGESTED_CUDA) -> str:
    conda = f'mamba install "pytorch >={MIN_TORCH} cuda{cuda.replace(".", "")}_*" "cuda-version {cuda}.*"'
    pip = f"pip install --force-reinstall 'torch>={MIN_TORCH}' --index-url https://download.pytorch.org/whl/{_cuda_tag(cuda)}"
    return conda if f.in_conda_env else pip


def fix_cuda_segops(f: Facts, cuda: str | None = None) -> str:
    cuda = cuda or f.torch_cuda_version or SUGGESTED_CUDA
    conda = f'mamba install "torch-segops * cuda{cuda.replace(".", "")}_*"'
    source = "TORCH_SEGOPS_WITH_CUDA=1 pip install --no-build-isolation -e .  (from a source checkout)"
    return f"{conda}   or, building from source: {source}" if f.in_conda_env else f"rebuild with CUDA: {source}"
