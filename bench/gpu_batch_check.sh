#!/usr/bin/env bash
# On one CUDA GPU: everything GPU-side of batched decode (issue 10, item 2) in one go.
#
#   bench/gpu_batch_check.sh [DIR, default build]      (OUT=dir keeps the logs; default a temp dir)
#
# Needs the default preset built with CUDA: DIR/tools/mlaconf and DIR/suites/gpu/mlaconf_gpu_tests
# (`cmake --build build --target mlaconf mlaconf_gpu_tests`), or DIR/mlaconf and DIR/mlaconf_gpu_tests
# side by side (stripped copies carried to a GPU machine), ~13 GB of free disk in $TMPDIR (SKIP_BIG=1
# leaves the full-size model out). The tiny model: ../shared/models/glm-dsa-tiny.gguf, else one
# synthesized with the same dims (seed 1). Expected time on an H200 host: about 5 minutes, most of it
# synthesizing the 12.4-GB model (not measured yet).
#
# Steps:
#  1. gtest batch.* (batched decode bit-identical to each sequence decoded alone at B = 1, 3, 8, 33 on
#     the tiny model and on a synthesized odd-size model, also with the decode steps as CUDA graphs;
#     split {0,0} / {0,0,0} batched equal to unsplit; misuse is an InputError);
#  2. `bench --batch 1,8,32,64` on the tiny model (1024 synthetic context rows per sequence), unsplit,
#     on virtual devices 0,0, and with --graph;
#  3. a full-size GLM-5 layer stack (real dims: hidden 6144, 64 heads, 256 experts of 2048, top-8,
#     vocab 154880; layer 0 dense, layers 1-2 MoE; Q4_K, head Q6_K: 12.4 GB) at 32K context:
#     `bench --batch 1,8,32,64 --context 32768`, with the floor (every weight once + the experts B
#     tokens pick + each sequence's top-k latent rows and indexer keys, at 4229 GB/s); again with --graph,
#     with the plan by batch (MLACONF_CUDA_BATCH_INVARIANT=0), and B = 1, 32 split over virtual devices 0,0.
# Prints the bench tables; exit 1 if a test failed or a bench did not run.
. "$(dirname "$0")/common.sh"
bench_start "${1:-build}" M=tools/mlaconf G=suites/gpu/mlaconf_gpu_tests || exit 2
bench_workdir
bench_gpu_state

bench_tiny_model "$M" "$W" || exit 2

echo "== gtest batch.*"
MLACONF_CLI="$(realpath "$M")" MLACONF_SHARED_DIR="$SHARED" "$G" --gtest_filter='batch.*' 2>&1 | tee "$OUT/gtest-batch.log" |
  grep -E "^\[  |differ|Failure|error|Expected|Which is"
[ "${PIPESTATUS[0]}" -eq 0 ] || fail=1

bench() {  # name, then bench arguments: one run, JSON to $OUT, a table to the terminal
  local name="$1"
  shift
  echo "-- $name: bench $*"
  if "$M" bench --backend cuda "$@" --json >"$OUT/bench-$name.json" 2>"$OUT/bench-$name.err"; then
    python3 - "$OUT/bench-$name.json" <<'PY' | tee "$OUT/bench-$name.txt" || cat "$OUT/bench-$name.json"
import json, sys
j = json.load(open(sys.argv[1]))
print(f"   graph {j['graph']}  devices '{j['devices']}'  context {j['context']} + prompt {j['prompt_tokens']}, "
      f"{j['decode_steps']} steps (the first, and with a graph its capture, timed apart); floor at {j['floor_gbs']} GB/s")
print(f"   {'B':>4} {'tok/s':>10} {'step ms':>9} {'untimed':>7} {'their ms':>9} {'floor ms':>9} {'floor tok/s':>12} {'% floor':>8} {'prefill s':>9}")
for r in j["batches"]:
    print(f"   {r['batch']:>4} {r['decode_tokens_per_s']:>10.1f} {r['step_ms']:>9.3f} {r.get('untimed_steps', 1):>7} {1e3 * r['warm_step_s']:>9.3f} "
          f"{r['floor_ms_per_step']:>9.3f} {r['floor_tokens_per_s']:>12.1f} {r['percent_of_floor']:>7.1f}% {r['prefill_s']:>9.3f}")
PY
  else
    fail=1
    cat "$OUT/bench-$name.err"
  fi
}

echo "== bench --batch on the tiny model"
bench tiny --model "$TINY" --batch 1,8,32,64 --context 1024 --prompt-tokens 16 --decode-steps 17
bench tiny-devices-0-0 --model "$TINY" --batch 1,8,32,64 --context 1024 --prompt-tokens 16 --decode-steps 17 --devices 0,0
bench tiny-graph --model "$TINY" --batch 1,8,32,64 --context 1024 --prompt-tokens 16 --decode-steps 17 --graph

if [ "${SKIP_BIG:-0}" != 1 ]; then
  BIG="$W/glm5-dims-3layers.gguf"
  echo "== synthesizing the full-size GLM-5 layer stack ($BIG)"
  s0=$(date +%s)
  "$M" synth --preset glm5 --layers 3 --dense-lead 1 --type-default Q4_K --type output.weight=Q6_K --seed 1 -o "$BIG" \
    >/dev/null || exit 2
  echo "   $(( $(date +%s) - s0 )) s, $(du -B1 --apparent-size "$BIG" | awk '{printf "%.2f GB", $1 / 1e9}')"
  echo "== bench --batch on it at 32K context"
  bench glm5-32k --model "$BIG" --batch 1,8,32,64 --context 32768 --prompt-tokens 8 --decode-steps 9
  bench glm5-32k-graph --model "$BIG" --batch 1,8,32,64 --context 32768 --prompt-tokens 8 --decode-steps 9 --graph
  MLACONF_CUDA_BATCH_INVARIANT=0 bench glm5-32k-plan-by-batch --model "$BIG" --batch 1,8,32,64 --context 32768 \
    --prompt-tokens 8 --decode-steps 9
  bench glm5-32k-devices-0-0 --model "$BIG" --batch 1,32 --context 32768 --prompt-tokens 8 --decode-steps 9 --devices 0,0
fi

echo
echo "== summary ($(( $(date +%s) - t0 )) s)"
echo "gtest batch.*: $(grep -E '^\[  (PASSED|FAILED)' "$OUT/gtest-batch.log" | tr '\n' ' ')"
for f in "$OUT"/bench-*.txt; do echo "$(basename "$f" .txt):"; sed 's/^/  /' "$f"; done
[ $fail -eq 0 ] && echo "ALL OK" || echo "SOMETHING FAILED (logs in $OUT)"
exit $fail
