#!/usr/bin/env bash
# Configures and builds mlaconf with the "default" preset (CUDA for sm_90 and sm_120 when nvcc is found).
# MLACONF_PRESET=cpu builds without CUDA. Extra arguments go to `cmake --build` (e.g. --target mlaconf).
set -euo pipefail
cd "$(dirname "$0")/.."
preset="${MLACONF_PRESET:-default}"
export PATH="/usr/local/cuda/bin:$PATH"
export CCACHE_DIR="${CCACHE_DIR:-$HOME/.cache/mlaconf-ccache}"
export CCACHE_MAXSIZE="${CCACHE_MAXSIZE:-5G}"
# Hits across clones in other folders (CI builds a fresh clone): paths relative to the checkout, and the
# working directory left out of the hash (it only matters for debug-info paths).
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$PWD}"
export CCACHE_NOHASHDIR="${CCACHE_NOHASHDIR:-1}"
cmake --preset "$preset" >/dev/null
cmake --build --preset "$preset" -j "$(nproc)" "$@"
