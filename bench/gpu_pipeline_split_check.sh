#!/usr/bin/env bash
# On one CUDA GPU: the check of a change that must not change what the CUDA pipeline computes (issue 39 item 2:
# optimized/pipeline.cpp split into files of one job, batched decode behind tools/backend's Backend, bench's
# floor from the measured copy bandwidth). Two builds of the default preset, before (BASE) and after (NEW):
#
#   bench/gpu_pipeline_split_check.sh NEW_DIR [BASE_DIR]      (OUT=dir keeps the logs; default a temp dir)
#
# Each DIR is a CMake build folder (targets mlaconf, mlaconf_gpu_tests and, for NEW, backend_tests) or a folder of
# stripped copies (DIR/mlaconf, DIR/mlaconf_gpu_tests, DIR/backend_tests). The tiny model: ../shared/models/glm-dsa-tiny.gguf, else one
# synthesized (seed 1). Steps:
#  1. every GPU suite with NEW (bench/gpu_suite_check.sh: each case passes or skips), and suites/backend's
#     backend_tests (batched decode through Backend: two sequences decoded together as each alone), none skipped;
#  2. with BASE too, the same outputs, byte for byte, from both builds (each run in a folder of its own, with
#     the same file names, so that the reports do not differ by their paths):
#     a. `generate --backend cuda --json` (tokens and margins with 17 digits) of a prompt of ids, 24 tokens;
#     b. `answer --backend cuda` (op replay of every op) of a reference f64 fixture (made by NEW), judged by
#        `compare --json`;
#     c. `capture --backend cuda --force-decisions` (the forward pass with the reference's decisions forced),
#        judged by `compare --json`;
#     d. `generate --backend cuda --devices 0,0 --json` (the layer split, virtual devices) as in a;
#  3. `bench --backend cuda --batch 1,3 --graph` with NEW: runs, prints the measured copy bandwidth and a floor
#     from it (the JSON's copy_gbs_measured = floor_gbs).
# Without BASE step 2 is skipped (said so). Exit 0 when every step held, 1 otherwise, 2 when it could not run.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
. bench/common.sh
NEW="${1:?usage: bench/gpu_pipeline_split_check.sh NEW_DIR [BASE_DIR]}"
BASE="${2:-}"
MN=$(bench_bin "$NEW" tools/mlaconf) || exit 2
MN="$(realpath "$MN")"
bench_workdir
bench_tiny_model "$MN" "$W" || exit 2
echo "tiny model: $TINY; logs: $OUT"

step() {  # name, then the verdict of the last command
  local name="$1" rc="$2"
  printf '%-58s %s\n' "$name" "$([ "$rc" = 0 ] && echo ok || echo FAIL)"
  [ "$rc" = 0 ] || fail=1
}

# 1. the GPU suites
OUT="$OUT/suite" bash bench/gpu_suite_check.sh "$NEW" >"$OUT/suite.log" 2>&1
step "1. GPU suites (bench/gpu_suite_check.sh, log suite.log)" $?

# 1b. batched decode through the Backend interface (suites/backend: the CUDA case runs on a GPU, skips elsewhere)
if BT=$(bench_bin "$NEW" suites/backend/backend_tests 2>/dev/null); then
  "$BT" --gtest_output="json:$OUT/backend_tests.json" >"$OUT/backend_tests.log" 2>&1 &&
    ! grep -q '"result": "SKIPPED"' "$OUT/backend_tests.json"
  step "1b. backend_tests, none skipped (log backend_tests.log)" $?
else
  step "1b. backend_tests: not built (cmake --build DIR --target backend_tests)" 1
fi

# 2. the same bytes from BASE and NEW
# The reference's fixture that b and c judge against (and whose decisions c forces), made once, by NEW.
CAP="--quiet --model $TINY --layers all --random-tokens 96 --seed 1 --decode-steps 2"
# Each build's CLI runs as ./mlaconf from a folder of its own, so that nothing it records (the command line of a
# capture) differs by path.
outputs() (  # cli, folder: every output of step 2 under folder (a subshell: its cd stays inside)
  d="$2"
  mkdir -p "$d" && cp "$OUT/golden.h5" "$d/golden.h5" && cp "$1" "$d/mlaconf" && cd "$d" || exit 2
  m=./mlaconf
  "$m" generate --model "$TINY" --prompt-ids 1,2,3,4,5,6,7,8 -n 24 --ignore-eos --backend cuda --json >gen.json 2>gen.err
  "$m" answer golden.h5 --model "$TINY" --backend cuda --quiet --out ops.h5 >answer.log 2>&1
  "$m" compare golden.h5 ops.h5 --json ops.json >ops.txt 2>&1
  # shellcheck disable=SC2086
  "$m" capture $CAP --backend cuda --force-decisions golden.h5 --out forced.h5 >forced.log 2>&1
  "$m" compare golden.h5 forced.h5 --json forced.json >forced.txt 2>&1
  "$m" generate --model "$TINY" --prompt-ids 1,2,3,4,5,6,7,8 -n 24 --ignore-eos --backend cuda --devices 0,0 --json \
    >gen_split.json 2>gen_split.err
)
if [ -n "$BASE" ]; then
  MB=$(bench_bin "$BASE" tools/mlaconf) || exit 2
  MB="$(realpath "$MB")"
  # shellcheck disable=SC2086
  "$MN" capture $CAP --precision f64 --out "$OUT/golden.h5" >"$OUT/golden.log" 2>&1
  step "2. the reference's fixture (golden.log)" $?
  outputs "$MB" "$OUT/base"
  outputs "$MN" "$OUT/new"
  for f in gen.json ops.json ops.txt forced.json forced.txt gen_split.json; do
    [ -s "$OUT/new/$f" ] && cmp -s "$OUT/base/$f" "$OUT/new/$f"
    step "2. $f: BASE and NEW byte for byte" $?
  done
  grep -q '"tokens"' "$OUT/new/gen.json"
  step "2. generate produced tokens (gen.json)" $?
else
  echo "2. skipped: no BASE build given (the outputs before the change are what step 2 compares with)"
fi

# 3. bench --batch measures its floor's bandwidth
"$MN" bench --model "$TINY" --backend cuda --batch 1,3 --context 70 --prompt-tokens 5 --decode-steps 5 --graph --json \
  >"$OUT/bench.json" 2>"$OUT/bench.err"
rc=$?
[ $rc = 0 ] && python3 - "$OUT/bench.json" <<'EOF'
import json, sys
j = json.load(open(sys.argv[1]))
bw = j["copy_gbs_measured"]
print(f"   copy bandwidth measured {bw:.0f} GB/s; floor at {j['floor_gbs']:.0f} GB/s; "
      + ", ".join(f"B = {r['batch']}: {r['decode_tokens_per_s']:.0f} tok/s, {r['percent_of_floor']:.1f} % of floor" for r in j["batches"]))
sys.exit(0 if bw > 0 and j["floor_gbs"] == bw and all(r["decode_tokens_per_s"] > 0 for r in j["batches"]) else 1)
EOF
step "3. bench --batch: floor from the measured copy bandwidth" $?
"$MN" bench --model "$TINY" --backend cuda --batch 1 --context 70 --prompt-tokens 5 --decode-steps 3 >"$OUT/bench.txt" 2>&1 &&
  grep -q "copy bandwidth" "$OUT/bench.txt"
step "3. bench --batch prints the measured bandwidth (bench.txt)" $?

echo "$( [ "$fail" = 0 ] && echo PASS || echo FAIL ) after $(( $(date +%s) - t0 )) s"  # t0: bench_workdir
exit "$fail"
