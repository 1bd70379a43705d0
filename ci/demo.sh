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
echo "== mlaconf generate: a text prompt through the GGUF's tokenizer, streamed, on the reference"
$M generate --model out/tiny.gguf --prompt "The old lighthouse keeper" -n 24
# The CUDA pipeline beside the reference (same prefix each step; first divergence, near-ties at margin < 0.05),
# only where this build has CUDA and the machine a GPU.
# (The probe: a 0-token cuda run exits 3, "not supported", in a build without CUDA.)
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q '^GPU' &&
   $M generate --model out/tiny.gguf --prompt-ids 1 -n 0 --backend cuda --json >/dev/null 2>&1; then
  echo "== mlaconf generate --backend both: reference and CUDA side by side"
  $M generate --model out/tiny.gguf --prompt "The old lighthouse keeper" -n 24 --backend both
fi
