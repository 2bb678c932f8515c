#!/usr/bin/env bash
# The whole test suite, from a fresh machine: set up, build, run pytest. Extra arguments go to pytest.
# PYTEST_WORKERS (default 2) pytest-xdist workers run it, one test module at a time each (tests/conftest.py,
# docs/ci.md); PYTEST_WORKERS=0 runs it in this process.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
bash tools/bootstrap.sh
printf '\n==> running the test suite\n'
workers=${PYTEST_WORKERS:-2}
xdist=()
[ "$workers" = 0 ] || xdist=(-n "$workers" --dist loadgroup --no-loadscope-reorder)
exec "$PY" -m pytest tests "${xdist[@]}" "$@"
