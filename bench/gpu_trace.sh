#!/usr/bin/env bash
# Where a CUDA decode step's time goes, on a GPU host without nsys: builds bench/cupti_trace.cpp (a CUPTI
# activity tracer injected with CUDA_INJECTION64_PATH) against the host's CUDA toolkit, runs the given
# command under it and summarizes the trace per decode step (bench/trace_summary.py: wall, device busy,
# idle gaps and what the host did meanwhile, kernels and runtime calls by time).
#
#   OUT=/some/dir bash bench/gpu_trace.sh mlaconf bench --backend cuda --model M.gguf --batch 1 --context 32768 \
#       --prompt-tokens 8 --decode-steps 9
#
# Writes $OUT/trace.csv.xz, $OUT/trace_summary.json and prints the summary (per stream too; TIMELINE=1 adds the
# last step's activities in order). Tracing costs time itself (the
# traced step is ~25% longer at B = 1: each runtime call is recorded); compare against an untraced run.
set -euo pipefail
OUT=${OUT:?set OUT to a directory}
mkdir -p "$OUT"
CUDA=${CUDA_HOME:-/usr/local/cuda}
H=$(find "$CUDA" /usr/local /usr /opt -name cupti_activity.h 2>/dev/null | head -1)
L=$(find "$CUDA" /usr/local /usr /opt -name 'libcupti.so*' 2>/dev/null | head -1)
if [ -z "$H" ] || [ -z "$L" ]; then
  echo "gpu_trace: CUPTI headers or library not found under $CUDA" >&2
  exit 3
fi
# The activity records are versioned structs: the newest the header defines.
newest() { grep -o "$1[0-9]*" "$H" | sort -V | tail -1; }
LIB="$OUT/libmlaconf_trace.so"
g++ -shared -fPIC -O2 -std=c++17 -DKERNEL_REC="$(newest CUpti_ActivityKernel)" -DMEMSET_REC="$(newest CUpti_ActivityMemset)" \
  -DMEMCPY_REC="$(newest CUpti_ActivityMemcpy)" -I"$CUDA/include" -I"$(dirname "$H")" "$(dirname "$0")/cupti_trace.cpp" \
  -L"$(dirname "$L")" -lcupti -o "$LIB"
export LD_LIBRARY_PATH="${LD_LIBRARY_PATH:-}:$(dirname "$L")"
CUDA_INJECTION64_PATH="$LIB" MLACONF_TRACE_OUT="$OUT/trace.csv" "$@" > "$OUT/command.out"
python3 "$(dirname "$0")/trace_summary.py" "$OUT/trace.csv" --steps "${STEPS:-4}" --json "$OUT/trace_summary.json" \
  ${TIMELINE:+--timeline}
xz -f -T4 "$OUT/trace.csv"
