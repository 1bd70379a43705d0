#!/usr/bin/env bash
# On a machine with two real GPUs (issue 12): the layer split with --devices 0,1 against one GPU.
#   bench/gpu_two_gpu_check.sh DIR_WITH_mlaconf      (MLACONF_SHARED_DIR: folder with models/glm-dsa-tiny.gguf)
# For the tiny model and a synthesized GLM-5-dims model of 3.9 GB: greedy tokens and 17-digit margins of
# `generate --backend cuda` on 0,1 equal to the unsplit run's (the arithmetic per layer is unchanged),
# `generate --backend both --devices 0,1`, and `bench` tokens/s at B=1 on one and on two GPUs.
set -uo pipefail
cd "$(dirname "$0")/.."
M="$1/mlaconf"
W="$(mktemp -d)"
nvidia-smi --query-gpu=index,name --format=csv,noheader
nvidia-smi topo -m 2>/dev/null | head -4
TINY="${MLACONF_SHARED_DIR:-../shared}/models/glm-dsa-tiny.gguf"
BIG="$W/glm5-dims-4layers-32experts.gguf"
"$M" synth --preset glm5 --layers 4 --dense-lead 1 --experts 32 --type-default Q4_K --type output.weight=Q6_K --seed 3 -o "$BIG" >/dev/null || exit 2
fail=0
ids=$(python3 -c "import random; r=random.Random(5); print(','.join(str(r.randrange(2000)) for _ in range(100)))")
for m in "$TINY" "$BIG"; do
  name=$(basename "$m" .gguf)
  "$M" generate --model "$m" --prompt-ids "$ids" -n 16 --backend cuda --json > "$W/one.json" || fail=1
  "$M" generate --model "$m" --prompt-ids "$ids" -n 16 --backend cuda --devices 0,1 --json > "$W/two.json" || fail=1
  same=$(python3 -c "import json;a=json.load(open('$W/one.json'));b=json.load(open('$W/two.json'));print('identical' if a['tokens']==b['tokens'] and a['margins']==b['margins'] else 'DIFFER')")
  [ "$same" = identical ] || fail=1
  echo "$name: tokens and margins on 0,1 vs one GPU: $same ($(python3 -c "import json;print(json.load(open('$W/two.json'))['backend'])"))"
  for d in "" "0,1"; do
    "$M" bench --model "$m" --backend cuda ${d:+--devices $d} --prompt-tokens 512 --decode-steps 32 --json > "$W/b.json" 2>/dev/null
    python3 -c "import json;j=json.load(open('$W/b.json'));print('  bench devices=%s: prefill %.0f tok/s, decode %.1f tok/s (B=1)'%('${d:-one}',j['prefill_tokens_per_s'],j['decode_tokens_per_s']))"
  done
done
"$M" generate --model "$TINY" --prompt-ids "$ids" -n 16 --backend both --devices 0,1 --json > "$W/both.json"; rc=$?
echo "generate --backend both --devices 0,1 on the tiny model: exit $rc, verdict $(python3 -c "import json;print(json.load(open('$W/both.json'))['verdict'])")"
[ $rc -eq 0 ] || fail=1
rm -rf "$W"
exit $fail
