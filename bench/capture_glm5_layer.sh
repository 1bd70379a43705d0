#!/usr/bin/env bash
# Benchmark (not a test): capture of one full-size GLM-5 MoE layer on this machine.
#
#   bench/capture_glm5_layer.sh [path/to/mlaconf] [work dir] [precision f32|f64]
#
# Synthesizes a GLM-5-dims model cut to 3 layers (layer 0 dense MLP, layers 1-2 MoE: hidden 6144,
# 64 heads, q_lora 2048, kv_lora 512, 256 routed experts of ff 2048, top-8, 1 shared, vocab 154880;
# every quantized tensor Q4_K, ~14 GB) once, then captures layer 1 (the first MoE layer, op level
# included, input from a real forward through layer 0) for 64 random tokens, under /usr/bin/time -v.
# Layer 2 exists only so that layer 1 is not the last layer: the 154880-row output head is not run.
# Targets (issue 4): peak RSS <= 4 GB, wall time <= 2 min, on 2 cores / 24 GB.
set -euo pipefail
cd "$(dirname "$0")/.."
MLACONF="${1:-build-cpu/tools/mlaconf}"
WORK="${2:-/tmp/mlaconf-bench}"
PREC="${3:-f32}"
mkdir -p "$WORK"
MODEL="$WORK/glm5-3layers-q4k.gguf"
if [ ! -s "$MODEL" ]; then
  echo "synthesizing $MODEL (once) ..."
  /usr/bin/time -f "synth: %e s wall, %M KB peak RSS" \
    "$MLACONF" synth --preset glm5 --layers 3 --dense-lead 1 --type-default Q4_K --seed 1 -o "$MODEL"
fi
OUT="$WORK/glm5-layer1-64tok-$PREC.h5"
LOG="$WORK/time-$PREC.txt"
/usr/bin/time -v -o "$LOG" "$MLACONF" capture --model "$MODEL" --layers 1 --random-tokens 64 --seed 1 \
  --precision "$PREC" --out "$OUT"
rss_kb=$(awk -F': ' '/Maximum resident set size/ {print $2}' "$LOG")
wall=$(awk -F': ' '/Elapsed \(wall clock\) time/ {print $2}' "$LOG")
cpu_user=$(awk -F': ' '/User time/ {print $2}' "$LOG")
echo "capture GLM-5 MoE layer 1, 64 tokens, precision $PREC, $(nproc) cores"
echo "  peak RSS  $((rss_kb / 1024)) MB   (target <= 4096 MB)"
echo "  wall      $wall   (target <= 2:00)"
echo "  user CPU  ${cpu_user} s"
echo "  fixture   $(du -h "$OUT" | cut -f1) $OUT"
awk -v r="$rss_kb" 'BEGIN { exit !(r <= 4 * 1024 * 1024) }' && echo "  RSS: within target" || echo "  RSS: OVER target"
