#!/usr/bin/env bash
# conda-build runs this file (its default build script on unix); the steps are v1's, shared through the source's
# `recipe` folder (meta.yaml).
set -euo pipefail
exec bash recipe/build.sh
