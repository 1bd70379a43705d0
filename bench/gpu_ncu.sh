#!/usr/bin/env bash
# On a GPU host with Nsight Compute: profile the launches of one kernel family under a command, and summarize them
# (bench/ncu_summary.py: a line per launch with time, DRAM / L2 / L1 / SM throughput, issue activity, warps active
# and eligible per scheduler, cache hit rates, registers, occupancy, and the warp stall reasons, largest first).
#
#   OUT=/some/dir bash bench/gpu_ncu.sh KERNEL_REGEX command [args...]
#   e.g. OUT=/tmp/ncu bash bench/gpu_ncu.sh gemv_mma_kernel build/optimized/mlaconf_kernel_bench --reps 1 \
#          --only 'gemv_experts(type=Q4_K,experts=8,of=256,b=64'
#
# KERNEL_REGEX: ncu's --kernel-name regex; SKIP (default 0) matching launches skipped first (kernel_bench runs a case's
# other variants before it: e.g. the grouped experts after 8 launches of the experts by id); COUNT (default 40)
# launches at most; NCU the ncu binary (default: on the PATH
# or under /usr/local/cuda*/bin, /opt/nvidia/nsight-compute); CLOCKS=base locks the clocks at base (ncu's default;
# here `--clock-control none`, so that the figures are those of the clocks the other measurements run at).
# Writes $OUT/prof.ncu-rep, details.csv, raw.csv, summary.md and summary.json; prints the summary. Each profiled
# launch is replayed once per metric pass (tens of times): keep the command's launches few (kernel_bench --reps 1).
set -euo pipefail
OUT=${OUT:?set OUT to a directory}
[ $# -ge 2 ] || { echo "usage: OUT=dir bash bench/gpu_ncu.sh KERNEL_REGEX command [args...]" >&2; exit 2; }
regex="$1"
shift
NCU=${NCU:-$(command -v ncu || ls /usr/local/cuda*/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1 || true)}
[ -n "$NCU" ] && [ -x "$NCU" ] || { echo "gpu_ncu: ncu not found (set NCU)" >&2; exit 3; }
mkdir -p "$OUT"
clock=(--clock-control none)
[ "${CLOCKS:-}" = base ] && clock=()
"$NCU" "${clock[@]}" --kernel-name "regex:$regex" --launch-skip "${SKIP:-0}" --launch-count "${COUNT:-40}" \
  --section SpeedOfLight --section MemoryWorkloadAnalysis --section SchedulerStats --section WarpStateStats \
  --section LaunchStats --section Occupancy \
  --metrics "regex:^smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio$" \
  -f -o "$OUT/prof" "$@" > "$OUT/command.out" 2> "$OUT/ncu.err"
"$NCU" --import "$OUT/prof.ncu-rep" --csv --page details > "$OUT/details.csv"
"$NCU" --import "$OUT/prof.ncu-rep" --csv --page raw > "$OUT/raw.csv"
python3 "$(dirname "$0")/ncu_summary.py" "$OUT/details.csv" --raw "$OUT/raw.csv" --json "$OUT/summary.json" | tee "$OUT/summary.md"
