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
EXTRA="${EXTRA:-}"   # e.g. EXTRA="--expert-cache-mb 256 --hidden-source synthetic"
# shellcheck disable=SC2086
/usr/bin/time -v -o "$LOG" "$MLACONF" capture --model "$MODEL" --layers 1 --random-tokens 64 --seed 1 \
  --precision "$PREC" $EXTRA --out "$OUT" &
tpid=$!
# Split the peak into anonymous memory (our buffers) and file-backed pages of the GGUF mapping
# (counted in RSS while mapped; the kernel can drop them at any time).
max_anon=0; max_file=0
sleep 1
cpid=$(pgrep -n -P "$tpid" || true)
while kill -0 "$tpid" 2>/dev/null; do
  if [ -n "$cpid" ] && [ -r "/proc/$cpid/smaps_rollup" ]; then
    a=$(awk '/^Anonymous:/ {print $2}' "/proc/$cpid/smaps_rollup" 2>/dev/null || echo 0)
    f=$(awk '/^Pss_File:/ {print $2}' "/proc/$cpid/smaps_rollup" 2>/dev/null || echo 0)
    [ "${a:-0}" -gt "$max_anon" ] && max_anon=$a
    [ "${f:-0}" -gt "$max_file" ] && max_file=$f
  fi
  sleep 2
done
wait "$tpid"
rss_kb=$(awk -F': ' '/Maximum resident set size/ {print $2}' "$LOG")
wall=$(awk -F': ' '/Elapsed \(wall clock\) time/ {print $2}' "$LOG")
cpu_user=$(awk -F': ' '/User time/ {print $2}' "$LOG")
echo "capture GLM-5 MoE layer 1, 64 tokens, precision $PREC, $(nproc) cores"
echo "  peak RSS  $((rss_kb / 1024)) MB   (target <= 4096 MB)"
echo "  wall      $wall   (target <= 2:00)"
echo "  user CPU  ${cpu_user} s"
echo "  of which  anonymous peak $((max_anon / 1024)) MB, file-backed (mmap of the GGUF) peak $((max_file / 1024)) MB (sampled every 2 s)"
echo "  fixture   $(du -h "$OUT" | cut -f1) $OUT"
awk -v r="$rss_kb" 'BEGIN { exit !(r <= 4 * 1024 * 1024) }' && echo "  RSS: within target" || echo "  RSS: OVER target"
