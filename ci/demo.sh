#!/usr/bin/env bash
# The main job on the embedded default model: installs what is missing, builds, synthesizes the tiny
# glm-dsa model from a fixed seed, inspects and validates it, captures golden fixtures of every layer with
# the reference, judges a float32 capture and an outside (numpy) answer against them, and ends with a
# greedy generation from a text prompt. Outputs land in out/.
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
echo "== mlaconf capture: every layer, op by op, 96 tokens (more than top_k 64: the indexer really selects), float64"
$M capture --model out/tiny.gguf --layers all --random-tokens 96 --seed 7 --precision f64 --out out/tiny-f64.h5
echo "== mlaconf capture: the same in float32"
$M capture --quiet --model out/tiny.gguf --layers all --random-tokens 96 --seed 7 --precision f32 --out out/tiny-f32.h5
echo "== mlaconf compare: the float32 reference judged against the float64 fixture (out/compare-f32.json, .png)"
$M compare out/tiny-f64.h5 out/tiny-f32.h5 --brief --json out/compare-f32.json --plot out/compare-f32.png | grep -v swatch
echo "== answering the fixture from outside C++ (tools/answer_fixture.py: numpy + h5py), judged by compare"
/usr/bin/python3 tools/answer_fixture.py out/tiny-f64.h5 out/answer.h5
$M compare out/tiny-f64.h5 out/answer.h5 --brief
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
