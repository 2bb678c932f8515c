#!/usr/bin/env bash
# The whole test suite, from a fresh machine: set up, build, run pytest. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
bash tools/bootstrap.sh
printf '\n==> running the test suite\n'
exec "$PY" -m pytest tests "$@"
