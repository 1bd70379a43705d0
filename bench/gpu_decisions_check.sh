#!/usr/bin/env bash
# On a CUDA machine: the decision-aware verdicts of issue 9 on models unlike the tiny one.
#
#   bench/gpu_decisions_check.sh [DIR with mlaconf, default build/tools]   (OUT=dir keeps the reports)
#
# For each stress model (few indexer heads: many exact-zero ReLU scores and ties; a small top_k at a
# longer context; head counts off multiples of 16; group-limited routing; mixed quant types):
#  1. the reference in f64 captures the expected fixture (prefill, 2 decode steps, 4 greedy tokens);
#  2. the CUDA pipeline captures the same, then `compare` judges it with attribution (must pass) and
#     without (reported: a near-tie flip fails everything downstream, the reason for the feature);
#  3. the CUDA pipeline captures again on the expected decisions (--force-decisions); `compare
#     --no-attribution` must pass on every row;
#  4. the reference in f32, forced, for the f32 figures;
#  5. `generate --backend both` (attribution) and `--force-decisions`: no FAILURE;
#  6. negative control: the dense-attention fault fails with attribution and with forcing.
# Writes OUT/decisions/<model>-*.json (compare reports) and prints a table. Exit 1 if a check fails.
set -uo pipefail
cd "$(dirname "$0")/.."
D="${1:-build/tools}"
M="$D/mlaconf"
[ -x "$M" ] || { echo "missing $M"; exit 2; }
W="$(mktemp -d)"
OUT="${OUT:-$W}"
R="$OUT/decisions"
mkdir -p "$R"
fail=0
row() { printf '%-10s %-44s %-6s %s\n' "$1" "$2" "$3" "$4"; }
expect() {  # model, what, wanted rc, got rc, note
  local ok=PASS
  [ "$3" = "$4" ] || { ok=FAIL; fail=1; }
  row "$1" "$2" "$ok" "rc=$4 (want $3) $5"
}
summary() { python3 - "$1" <<'PY'
import json,sys
j=json.load(open(sys.argv[1]))
f=j.get("first_failure")
print("clean %s/%s, failures %d%s" % (j.get("rows_clean_at_end"), j.get("rows_total"), j["failures"],
      ", first: layer %s %s" % (f["layer"], f["op"]) if f else ""))
PY
}
# name | synth options | prompt tokens
MODELS=(
  "s1|--seed 11 --n-head 6 --indexer-heads 4 --top-k 48 --layers 3 --dense-lead 1 --experts 16 --experts-used 4 --expert-groups 4 --groups-used 2 --type ffn_up_exps=Q3_K --type attn_output=Q5_1 --type attn_kv_a_mqa=Q6_K|260"
  "s2|--seed 12 --n-head 5 --indexer-heads 2 --top-k 32 --layers 3 --dense-lead 1 --experts 16 --experts-used 2 --indexer-types FFS --type ffn_gate_exps=IQ4_XS --type attn_q_b=Q5_0|400"
  "s3|--seed 13 --n-head 7 --indexer-heads 3 --top-k 64 --layers 2 --dense-lead 1 --experts 32 --experts-used 4 --expert-groups 8 --groups-used 3 --type ffn_down_exps=Q4_1 --type attn_q_a.weight=Q8_0|600"
)
row model check verdict detail
for m in "${MODELS[@]}"; do
  IFS='|' read -r name opts T <<< "$m"
  # shellcheck disable=SC2086
  "$M" synth $opts -o "$W/$name.gguf" > "$R/$name-synth.log" 2>&1 || { row "$name" synth FAIL "$(tail -1 "$R/$name-synth.log")"; fail=1; continue; }
  cap="--model $W/$name.gguf --random-tokens $T --seed 1 --decode-steps 2 --generate 4 --op-layers 1 --quiet"
  # shellcheck disable=SC2086
  "$M" capture $cap --precision f64 --out "$W/$name-e.h5" > "$R/$name-cap.log" 2>&1 || { row "$name" "capture f64" FAIL "$(tail -1 "$R/$name-cap.log")"; fail=1; continue; }
  # shellcheck disable=SC2086
  "$M" capture $cap --backend cuda --out "$W/$name-cuda.h5" >> "$R/$name-cap.log" 2>&1
  "$M" compare "$W/$name-e.h5" "$W/$name-cuda.h5" --json "$R/$name-cuda.json" > "$R/$name-cuda.txt" 2>&1; rc=$?
  expect "$name" "cuda vs f64, decision-aware" 0 $rc "$(summary "$R/$name-cuda.json")"
  "$M" compare "$W/$name-e.h5" "$W/$name-cuda.h5" --no-attribution --json "$R/$name-cuda-noattr.json" > "$R/$name-cuda-noattr.txt" 2>&1; rc=$?
  row "$name" "cuda vs f64, --no-attribution (reported)" "rc=$rc" "$(summary "$R/$name-cuda-noattr.json")"
  # shellcheck disable=SC2086
  "$M" capture $cap --backend cuda --force-decisions "$W/$name-e.h5" --out "$W/$name-cudaf.h5" >> "$R/$name-cap.log" 2>&1
  "$M" compare "$W/$name-e.h5" "$W/$name-cudaf.h5" --no-attribution --json "$R/$name-cudaf.json" > "$R/$name-cudaf.txt" 2>&1; rc=$?
  expect "$name" "cuda forced vs f64, every row" 0 $rc "$(summary "$R/$name-cudaf.json")"
  # shellcheck disable=SC2086
  "$M" capture $cap --precision f32 --force-decisions "$W/$name-e.h5" --out "$W/$name-f32f.h5" >> "$R/$name-cap.log" 2>&1
  "$M" compare "$W/$name-e.h5" "$W/$name-f32f.h5" --no-attribution --json "$R/$name-f32f.json" > "$R/$name-f32f.txt" 2>&1; rc=$?
  expect "$name" "reference f32 forced vs f64, every row" 0 $rc "$(summary "$R/$name-f32f.json")"
  ids=$(python3 -c "import random; r=random.Random(5); print(','.join(str(r.randrange(2048)) for _ in range($T)))")
  "$M" generate --model "$W/$name.gguf" --prompt-ids "$ids" -n 12 --backend both --json > "$R/$name-gen.json" 2> "$R/$name-gen.err"; rc=$?
  expect "$name" "generate --backend both" 0 $rc "$(python3 -c "import json;j=json.load(open('$R/$name-gen.json'));print(j['verdict'],[d['class'] for d in j['divergences']])" 2>/dev/null)"
  "$M" generate --model "$W/$name.gguf" --prompt-ids "$ids" -n 12 --backend both --force-decisions --json > "$R/$name-genf.json" 2>> "$R/$name-gen.err"; rc=$?
  expect "$name" "generate --backend both --force-decisions" 0 $rc "$(python3 -c "import json;j=json.load(open('$R/$name-genf.json'));print(j['verdict'],j['decision_failures'],[d['class'] for d in j['divergences']])" 2>/dev/null)"
  # shellcheck disable=SC2086
  "$M" capture $cap --backend cuda --fault dense-attention --out "$W/$name-dense.h5" >> "$R/$name-cap.log" 2>&1
  "$M" compare "$W/$name-e.h5" "$W/$name-dense.h5" --json "$R/$name-dense.json" > /dev/null 2>&1; rc=$?
  expect "$name" "dense-attention fault, decision-aware" 1 $rc "$(summary "$R/$name-dense.json")"
  # shellcheck disable=SC2086
  "$M" capture $cap --backend cuda --fault dense-attention --force-decisions "$W/$name-e.h5" --out "$W/$name-densef.h5" >> "$R/$name-cap.log" 2>&1
  "$M" compare "$W/$name-e.h5" "$W/$name-densef.h5" --no-attribution --json "$R/$name-densef.json" > /dev/null 2>&1; rc=$?
  expect "$name" "dense-attention fault, forced" 1 $rc "$(summary "$R/$name-densef.json")"
  "$M" generate --model "$W/$name.gguf" --prompt-ids "$ids" -n 12 --backend both --fault dense-attention --json > "$R/$name-gendense.json" 2>/dev/null; rc=$?
  expect "$name" "generate both, dense-attention fault" 1 $rc "$(python3 -c "import json;j=json.load(open('$R/$name-gendense.json'));print(j['verdict'])" 2>/dev/null)"
done
python3 bench/decision_bounds.py "$R" > "$R/bounds.md" 2>&1 && cat "$R/bounds.md"
rm -rf "$W"/*.gguf "$W"/*.h5
exit $fail
