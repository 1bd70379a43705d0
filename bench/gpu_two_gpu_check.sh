#!/usr/bin/env bash
# On a machine with two real GPUs (issue 12): the layer split with --devices 0,1 against one GPU.
#   bench/gpu_two_gpu_check.sh [DIR, default build]      (MLACONF_SHARED_DIR: folder with models/glm-dsa-tiny.gguf)
# Models: the tiny model, and a synthesized GLM-5-dims model of 12.1 GB (8 layers, 64 experts, Q4_K, head Q6_K)
# that the pipeline's plan spreads over both devices (layers 0-6 | 7, the head on the second; with 6 layers the
# plan at batch 1 keeps every layer on the first device, which a rehearsal on virtual devices showed). For each:
#  - greedy tokens and 17-digit margins of `generate --backend cuda` on 0,1 equal to the one-GPU run's
#    (the arithmetic per layer is unchanged, so they must be identical, not close);
#  - the split that ran (each device must hold layers; the script fails if a stage is empty);
#  - `bench` tokens/s at B=1 (single-sequence path) and `bench --batch 1,32` (batched decode), on one and two GPUs.
# Then `generate --backend both --devices 0,1` on the tiny model.
set -uo pipefail
DEVS="${DEVS:-0,1}"   # DEVS=0,0 rehearses the script on one GPU (virtual devices)
cd "$(dirname "$0")/.."
. bench/common.sh
M=$(bench_bin "${1:-build}" tools/mlaconf) || exit 2
W="$(mktemp -d)"
nvidia-smi --query-gpu=index,name --format=csv,noheader
nvidia-smi topo -m 2>/dev/null | head -4
TINY="${MLACONF_SHARED_DIR:-../shared}/models/glm-dsa-tiny.gguf"
BIG="$W/glm5-dims-8layers-64experts.gguf"
t0=$(date +%s)
"$M" synth --preset glm5 --layers 8 --dense-lead 1 --experts 64 --type-default Q4_K --type output.weight=Q6_K --seed 3 -o "$BIG" >/dev/null || exit 2
echo "synthesized $(du -B1 --apparent-size "$BIG" | awk '{printf "%.2f GB", $1/1e9}') in $(( $(date +%s) - t0 )) s"
"$M" plan -m "$BIG" --devices 2 --memory-per-device 139 --context 4096
fail=0
ids=$(python3 -c "import random; r=random.Random(5); print(','.join(str(r.randrange(2000)) for _ in range(100)))")
for m in "$TINY" "$BIG"; do
  name=$(basename "$m" .gguf)
  "$M" generate --model "$m" --prompt-ids "$ids" -n 16 --backend cuda --json > "$W/one.json" || fail=1
  "$M" generate --model "$m" --prompt-ids "$ids" -n 16 --backend cuda --devices "$DEVS" --json > "$W/two.json" || fail=1
  same=$(python3 -c "import json;a=json.load(open('$W/one.json'));b=json.load(open('$W/two.json'));print('identical' if a['tokens']==b['tokens'] and a['margins']==b['margins'] else 'DIFFER')")
  [ "$same" = identical ] || fail=1
  split=$(python3 -c "import json;print(json.load(open('$W/two.json'))['backend'])")
  echo "$name: tokens and margins on $DEVS vs one GPU: $same ($split)"
  # "cuda (devices 0,1: layers A | B)": a '-' stage holds no layer, and then no hand-off between GPUs ran.
  case "$split" in *"| -"*|*": layers - |"*) echo "  a stage is empty: the hand-off was not exercised"; [ "$m" = "$BIG" ] && fail=1 ;; esac
  for d in "" "$DEVS"; do
    "$M" bench --model "$m" --backend cuda ${d:+--devices $d} --prompt-tokens 512 --decode-steps 32 --json > "$W/b.json" 2>/dev/null
    python3 -c "import json;j=json.load(open('$W/b.json'));print('  bench devices=%s: prefill %.0f tok/s, decode %.1f tok/s (B=1, single-sequence path)'%('${d:-one}',j['prefill_tokens_per_s'],j['decode_tokens_per_s']))"
    "$M" bench --model "$m" --backend cuda ${d:+--devices $d} --batch 1,32 --context 2048 --prompt-tokens 16 --decode-steps 16 > "$W/bb.txt" 2>&1 || fail=1
    sed "s/^/  batched devices=${d:-one}: /" "$W/bb.txt"
  done
done
"$M" generate --model "$TINY" --prompt-ids "$ids" -n 16 --backend both --devices "$DEVS" --json > "$W/both.json"; rc=$?
echo "generate --backend both --devices $DEVS on the tiny model: exit $rc, verdict $(python3 -c "import json;print(json.load(open('$W/both.json'))['verdict'])")"
[ $rc -eq 0 ] || fail=1
rm -rf "$W"
echo "total $(( $(date +%s) - t0 )) s"
exit $fail
