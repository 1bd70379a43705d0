#!/usr/bin/env bash
# The test command: installs what is missing, builds, and runs every suite through ctest.
# GPU tests skip with their reason where no CUDA device is present; they really run on a GPU machine.
set -euo pipefail
cd "$(dirname "$0")/.."
bash ci/deps.sh
# llama.cpp for `answer --backend llama.cpp` (cached wheel; never fatal: its tests then skip)
bash ci/llama_cpp.sh || true
bash ci/build.sh
preset="${MLACONF_PRESET:-default}"
[ -x ci/fuzz.sh ] && bash ci/fuzz.sh --short
ctest --preset "$preset" -j "$(nproc)" "$@"
