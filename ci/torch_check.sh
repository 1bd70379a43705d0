#!/usr/bin/env bash
# The torch-hooks check (issue 36 item 5; python/mlaconf_answer/torch_hooks.py): HF transformers' own
# GlmMoeDsaForCausalLM, built from the tiny GGUF (weights dequantized by gguf-py through
# tools/hf_oracle/make_oracle.py), answers an mlaconf capture of the same model and ids through module hooks,
# and `mlaconf compare` judges it.
#
#   ci/torch_check.sh [f64|f32|stock|custom|ds32|all]     (default all)
#     f64    the float64 run with the oracle's conventions: must PASS at f64 bounds
#     f32    the float32 run with the same conventions: must PASS at f32 bounds
#     stock  negative control: HF as shipped (q_a/kv_a norm eps 1e-6, float32 drop points): must FAIL,
#            first failure at layer 0 attn_out
#     custom the Python API on a module tree of the user's own (the model wrapped as net.*, a re-rooted
#            name map, layers=): f64 must PASS; a wrong map (attn_out read from the attention's input) FAIL
#            at layer 0 attn_out (suites/torch_hooks/custom_map.py)
#     ds32   DeepseekV32ForCausalLM (name map DEEPSEEK_V32) on the HF cross-check's synthesized deepseek32
#            model (YaRN, 8 expert groups; tools/hf_oracle/configs.sh), 48 ids: f64 must PASS at f64 bounds
#
# torch and transformers live in a venv of their own, not in CI's python (a CPU torch wheel from PyPI pulls
# ~5 GB of CUDA packages): MLACONF_TORCH_VENV (default /work/venv-torch), made by
#   python3 -m venv /work/venv-torch && /work/venv-torch/bin/pip install torch transformers==5.17.0 numpy h5py gguf
# Without it this prints "not supported: torch/transformers not installed" and exits 77 (ctest: skipped).
# MLACONF_CLI: the mlaconf binary (default build/tools/mlaconf, else build-cpu/tools/mlaconf).
# MLACONF_SHARED_DIR: ../shared (its models/glm-dsa-tiny.gguf; else `mlaconf synth --seed 1` makes the same).
# Exit 0 pass, 1 fail, 2 bad setup, 77 skipped.
set -uo pipefail
cd "$(dirname "$0")/.."
SRC=$(pwd)
mode="${1:-all}"
case "$mode" in f64|f32|stock|custom|ds32|all) ;; *) echo "usage: ci/torch_check.sh [f64|f32|stock|custom|ds32|all]"; exit 2 ;; esac
VENV="${MLACONF_TORCH_VENV:-/work/venv-torch}"
PY="$VENV/bin/python"
if [ ! -x "$PY" ] || ! "$PY" -c 'import torch, transformers, gguf, h5py, numpy' 2>/dev/null; then
  echo "not supported: torch/transformers not installed (no venv with torch, transformers, gguf, h5py at $VENV; MLACONF_TORCH_VENV)"
  exit 77
fi
CLI="${MLACONF_CLI:-}"
for c in "$CLI" build/tools/mlaconf build-cpu/tools/mlaconf; do
  if [ -n "$c" ] && [ -x "$c" ]; then CLI=$(readlink -f "$c"); break; fi
done
[ -x "$CLI" ] || { echo "ci/torch_check.sh: no mlaconf binary (MLACONF_CLI)"; exit 2; }
SCRATCH="${TORCH_CHECK_SCRATCH:-$(mktemp -d /tmp/mlaconf-torch.XXXXXX)}"
mkdir -p "$SCRATCH"
SHARED="${MLACONF_SHARED_DIR:-$SRC/../shared}"
MODEL="$SHARED/models/glm-dsa-tiny.gguf"
if [ ! -f "$MODEL" ]; then
  MODEL="$SCRATCH/tiny.gguf"
  "$CLI" synth --seed 1 --out "$MODEL" >/dev/null || { echo "ci/torch_check.sh: synth failed"; exit 2; }
fi
note() { echo "ci/torch_check.sh: $*"; }
t0=$(date +%s)
# 96 ids (top_k is 64: rows 64-95 really select), numpy.random.RandomState(1).randint(0, 2048, 96)
IDS=$("$PY" -c 'import numpy as np; print(",".join(map(str, np.random.RandomState(1).randint(0, 2048, size=96))))')
FX="$SCRATCH/fixture.h5"
if [ ! -f "$FX" ]; then
  "$CLI" capture --model "$MODEL" --layers all --prompt-ids "$IDS" --precision f64 --decode-steps 0 --quiet --out "$FX" \
    || { note "capture failed"; exit 2; }
fi
note "fixture $FX ($(( $(date +%s) - t0 )) s)"
rc=0
run() {  # run NAME DTYPE WANT_RC [extra args]
  local name=$1 dt=$2 want=$3; shift 3
  local ans="$SCRATCH/answer_$name.h5" t=$(date +%s) fx="${RUN_FX:-$FX}"
  if ! PYTHONPATH="$SRC/python" MLACONF_SOURCE_DIR="$SRC" "$PY" -m mlaconf_answer.torch_hooks --fixture "$fx" \
       --gguf "${RUN_MODEL:-$MODEL}" --dtype "$dt" --threads "$(nproc)" --out "$ans" "$@"; then
    note "$name: the torch answer failed"; rc=1; return
  fi
  "$CLI" compare "$fx" "$ans" --brief --json "$SCRATCH/compare_$name.json" > "$SCRATCH/compare_$name.txt" 2>&1
  local got=$?
  grep -E "^(summary|first failure)" "$SCRATCH/compare_$name.txt"
  "$PY" - "$SCRATCH/compare_$name.json" <<'EOF'
import json, sys
j = json.load(open(sys.argv[1]))
acts = [d for d in j["datasets"] if "nmse" in d and d.get("tol")]
w = max(acts, key=lambda d: d["nmse"] / d["tol"]["nmse"])
print(f"  worst nmse {max(d['nmse'] for d in acts):.3g}; closest to its bound: {w['path']} nmse {w['nmse']:.3g} "
      f"(bound {w['tol']['nmse']:.3g}, precision {w['precision']}); first failure: {j.get('first_failure')}")
EOF
  if [ "$got" != "$want" ]; then
    note "$name: compare exit $got, want $want"; rc=1
  elif [ "$name" = stock ] && ! grep -q "first failure: layer 0 attn_out" "$SCRATCH/compare_$name.txt"; then
    note "stock: failed, but not first at layer 0 attn_out"; rc=1
  else
    note "$name: compare exit $got as expected ($(( $(date +%s) - t )) s)"
  fi
}
[ "$mode" = f64 ] || [ "$mode" = all ] && run f64 f64 0
[ "$mode" = f32 ] || [ "$mode" = all ] && run f32 f32 0
[ "$mode" = stock ] || [ "$mode" = all ] && run stock f64 1 --stock
if [ "$mode" = ds32 ] || [ "$mode" = all ]; then
  DS="$SCRATCH/deepseek32.gguf"
  spec=$(grep -o '"deepseek32|[^|]*' tools/hf_oracle/configs.sh | cut -d'|' -f2)
  # shellcheck disable=SC2086
  if "$CLI" synth $spec --out "$DS" >/dev/null && \
     "$CLI" capture --model "$DS" --layers all --precision f64 --decode-steps 0 --quiet --out "$SCRATCH/ds32.h5" \
       --prompt-ids "$("$PY" -c 'import numpy as np; print(",".join(map(str, np.random.RandomState(1).randint(0, 640, size=48))))')"; then
    RUN_FX="$SCRATCH/ds32.h5" RUN_MODEL="$DS" run ds32 f64 0
  else
    note "ds32: synth or capture failed"; rc=1
  fi
fi
if [ "$mode" = custom ] || [ "$mode" = all ]; then
  t=$(date +%s)
  if ! MLACONF_SOURCE_DIR="$SRC" "$PY" suites/torch_hooks/custom_map.py "$FX" "$MODEL" "$SCRATCH/custom_good.h5" "$SCRATCH/custom_bad.h5"; then
    note "custom: the torch answer failed"; rc=1
  else
    "$CLI" compare "$FX" "$SCRATCH/custom_good.h5" --brief > "$SCRATCH/compare_custom_good.txt" 2>&1; g=$?
    "$CLI" compare "$FX" "$SCRATCH/custom_bad.h5" --brief > "$SCRATCH/compare_custom_bad.txt" 2>&1; b=$?
    grep -hE "^(summary|first failure)" "$SCRATCH/compare_custom_good.txt" "$SCRATCH/compare_custom_bad.txt"
    if [ $g != 0 ] || [ $b != 1 ] || ! grep -q "first failure: layer 0 attn_out" "$SCRATCH/compare_custom_bad.txt"; then
      note "custom: compare exit $g (want 0) for the own map, $b (want 1, first at layer 0 attn_out) for the wrong map"; rc=1
    else
      note "custom: own map PASS, wrong map FAIL at layer 0 attn_out, as expected ($(( $(date +%s) - t )) s)"
    fi
  fi
fi
note "$mode: $([ $rc = 0 ] && echo PASS || echo FAIL) in $(( $(date +%s) - t0 )) s (scratch $SCRATCH)"
[ -z "${TORCH_CHECK_SCRATCH:-}" ] && [ $rc = 0 ] && rm -rf "$SCRATCH"
exit $rc
