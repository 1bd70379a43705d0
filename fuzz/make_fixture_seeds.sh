#!/usr/bin/env bash
# Regenerates the fixture fuzzer's seeds (fuzz/fuzz_fixture.cpp, ci/fuzz.sh): real fixtures of the
# synthesized tiny model (`mlaconf synth --seed 1`), kept small because libFuzzer mutates whole files:
#   model_level_l0.h5      layer 0 at model level, 4 random tokens, float32
#   greedy.h5              every layer at model level, 2 tokens, 2 greedy tokens (a greedy case)
#   op_level_l0_decode.h5  layer 0 with op-level datasets, 2 tokens and one decode step (indexer, cache)
#   fuzz/make_fixture_seeds.sh [path/to/mlaconf]      (default: build-cpu/tools/mlaconf)
set -euo pipefail
cd "$(dirname "$0")/.."
MLACONF="$(realpath "${1:-build-cpu/tools/mlaconf}")"
cd fuzz/fixture_seeds
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
"$MLACONF" synth --seed 1 --out "$tmp/m.gguf" >/dev/null
cap=("$MLACONF" capture --quiet --model "$tmp/m.gguf" --precision f32)
"${cap[@]}" --layers 0 --random-tokens 4 --decode-steps 0 --no-op-level --out model_level_l0.h5
"${cap[@]}" --random-tokens 2 --decode-steps 0 --generate 2 --no-op-level --out greedy.h5
"${cap[@]}" --layers 0 --op-layers 0 --random-tokens 2 --decode-steps 1 --out op_level_l0_decode.h5
ls -l ./*.h5
