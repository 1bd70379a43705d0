#!/usr/bin/env bash
# The main job on the embedded default model: installs what is missing, builds, synthesizes the tiny
# glm-dsa model from a fixed seed, inspects and validates it, and runs the reference on it.
set -euo pipefail
cd "$(dirname "$0")/.."
bash ci/deps.sh
bash ci/build.sh --target mlaconf
M=build/tools/mlaconf
mkdir -p out
echo "== mlaconf synth: the embedded default model (seed 1)"
$M synth --seed 1 --out out/tiny.gguf
echo "== mlaconf inspect"
$M inspect out/tiny.gguf
