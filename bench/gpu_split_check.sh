#!/usr/bin/env bash
# On one CUDA GPU: everything GPU-side of issue 11 (layer split) in one go, through virtual devices
# (--devices 0,0 and 0,0,0 name the same GPU for every stage, so the split's code path runs).
#
#   bench/gpu_split_check.sh [DIR, default build]      (OUT=dir keeps the logs; default a temp dir)
#
# Needs the default preset built with CUDA: DIR/tools/mlaconf and DIR/suites/gpu/mlaconf_gpu_tests
# (`cmake --build build --target mlaconf mlaconf_gpu_tests`), or DIR/mlaconf and DIR/mlaconf_gpu_tests
# side by side (stripped copies carried to a GPU machine: strip -o DIR/mlaconf build/tools/mlaconf ...),
# ~4 GB of free disk in $TMPDIR. The tiny model: ../shared/models/glm-dsa-tiny.gguf, else one synthesized
# with the same dims (seed 1) and given to the gtest cases through MLACONF_SHARED_DIR. Expected time on
# an H200 host: a few minutes, most of it synthesizing the 3.9-GB model (not measured yet).
#
# Steps:
#  1. synthesizes a model of several GB (GLM-5 dims: hidden 6144, 64 heads, vocab 154880; 4 layers, 32
#     experts, Q4_K + Q6_K head: 3.9 GB) and a header-only full GLM-5 (UD-Q4_K_XL-like mix) for `plan`;
#  2. the gtest cases split.* (bit-identical logits for {0,0} and {0,0,0} vs unsplit on both models,
#     the lost-hand-off negative control, `generate --backend both --devices ...`);
#  3. per model and device list: `generate --backend cuda --json` (tokens and margins, printed with 17
#     digits, must equal the unsplit run's exactly) and `bench --backend cuda --json` (tokens/s);
#  4. the generation check split on the tiny model: `generate --backend both --devices 0,0 | 0,0,0`;
#  5. `capture --backend cuda --devices 0,0,0` judged by `compare` against the unsplit capture;
#  6. `plan` on the full GLM-5 header: 8 x 96 GiB at 32K fits, 4 x 96 GiB does not.
# Prints one table; exit 1 if any check failed.
. "$(dirname "$0")/common.sh"
bench_start "${1:-build}" M=tools/mlaconf G=suites/gpu/mlaconf_gpu_tests || exit 2
bench_workdir

bench_tiny_model "$M" "$W" || exit 2
BIG="$W/glm5-dims-4layers-32experts.gguf"
echo "== synthesizing the several-GB model ($BIG)"
s0=$(date +%s)
"$M" synth --preset glm5 --layers 4 --dense-lead 1 --experts 32 \
  --type-default Q4_K --type output.weight=Q6_K --seed 3 -o "$BIG" >/dev/null || exit 2
echo "   $(( $(date +%s) - s0 )) s, $(du -B1 --apparent-size "$BIG" | awk '{printf "%.2f GB", $1 / 1e9}')"
# shellcheck disable=SC2046
"$M" synth --preset glm5 $(cat synth/mixes/glm5-ud-q4_k_xl.args) --header-only --split 8 --seed 1 \
  --out "$W/glm5-ud.gguf" >/dev/null || exit 2

echo "== gtest split.*"
MLACONF_CLI="$(realpath "$M")" MLACONF_SHARED_DIR="$SHARED" \
  MLACONF_SPLIT_MODEL="$BIG" "$G" --gtest_filter='split.*' 2>&1 | tee "$OUT/gtest-split.log" | grep -E "^\[  |bit-identical|Failure|error" 
[ "${PIPESTATUS[0]}" -eq 0 ] || fail=1

field() { sed -E "s/.*\"$1\": (\[[^]]*\]|[^,}]*).*/\1/" <<<"$2"; }
rows=()
for model in "$TINY" "$BIG"; do
  name=$(basename "$model" .gguf)
  base_tokens="" base_margins=""
  for devs in "" 0,0 0,0,0; do
    dflag=${devs:+--devices $devs}
    # shellcheck disable=SC2086
    g=$("$M" generate --model "$model" --prompt-ids 11,22,33,44,55,66,77,88,99,111 -n 16 --ignore-eos \
        --backend cuda --json $dflag 2>>"$OUT/generate.err")
    rc=$?
    tokens=$(field tokens "$g"); margins=$(field margins "$g")
    if [ -z "$devs" ]; then base_tokens="$tokens"; base_margins="$margins"; same="(base)"
    elif [ "$tokens" == "$base_tokens" ] && [ "$margins" == "$base_margins" ]; then same="identical"
    else same="DIFFERENT"; fail=1; fi
    [ $rc -eq 0 ] || { same="exit $rc"; fail=1; }
    # shellcheck disable=SC2086
    b=$("$M" bench --model "$model" --backend cuda --prompt-tokens 128 --decode-steps 16 --json $dflag 2>>"$OUT/bench.err")
    pf=$(field prefill_tokens_per_s "$b"); dc=$(field decode_tokens_per_s "$b")
    rows+=("$(printf "%-32s %-8s %-22s %10s %10s" "$name" "${devs:-none}" "$same" "$pf" "$dc")")
  done
done

echo "== generation check split (tiny: reference vs cuda)"
gen_rows=()
for devs in 0,0 0,0,0; do
  j=$("$M" generate --model "$TINY" --prompt-ids 11,22,33,44,55,66,77,88,99,111 -n 16 --ignore-eos --backend both \
      --devices "$devs" --json 2>>"$OUT/generate.err")
  rc=$?
  [ $rc -eq 0 ] || fail=1
  gen_rows+=("$(printf "%-8s exit %d verdict %s" "$devs" "$rc" "$(field verdict "$j")")")
done

echo "== capture --backend cuda --devices 0,0,0 vs unsplit"
"$M" capture --quiet --backend cuda --model "$TINY" --layers all --random-tokens 24 --seed 4 --decode-steps 2 \
  --out "$W/unsplit.h5" && \
"$M" capture --quiet --backend cuda --devices 0,0,0 --model "$TINY" --layers all --random-tokens 24 --seed 4 \
  --decode-steps 2 --out "$W/split.h5" && \
"$M" compare "$W/unsplit.h5" "$W/split.h5" --json "$OUT/capture-split-vs-unsplit.json" >"$OUT/capture-compare.txt" 2>&1
crc=$?
[ $crc -eq 0 ] || fail=1

echo "== plan (full GLM-5 header, UD-Q4_K_XL-like mix, 32K context)"
"$M" plan --model "$W/glm5-ud-00001-of-00008.gguf" --devices 8 --memory-per-device 96 --context 32768 | tee "$OUT/plan-8x96.txt"
prc8=${PIPESTATUS[0]}
"$M" plan --model "$W/glm5-ud-00001-of-00008.gguf" --devices 4 --memory-per-device 96 --context 32768 2>&1 | tee "$OUT/plan-4x96.txt"
prc4=${PIPESTATUS[0]}
[ "$prc8" -eq 0 ] && [ "$prc4" -eq 2 ] || fail=1

echo
echo "== summary ($(( $(date +%s) - t0 )) s)"
printf "%-32s %-8s %-22s %10s %10s\n" model devices "greedy vs unsplit" "prefill/s" "decode/s"
for r in "${rows[@]}"; do echo "$r"; done
echo "generation check split (generate --backend both):"
for r in "${gen_rows[@]}"; do echo "  $r"; done
echo "capture --devices 0,0,0 vs unsplit: compare exit $crc (report $OUT/capture-split-vs-unsplit.json)"
echo "plan: 8 x 96 GiB exit $prc8 (want 0), 4 x 96 GiB exit $prc4 (want 2)"
echo "gtest split.*: $(grep -E '^\[  (PASSED|FAILED)' "$OUT/gtest-split.log" | tr '\n' ' ')"
[ $fail -eq 0 ] && echo "ALL OK" || echo "SOMETHING FAILED (logs in $OUT)"
exit $fail
