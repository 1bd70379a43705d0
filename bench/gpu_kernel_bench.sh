#!/usr/bin/env bash
# On a CUDA host, in one command: build bench/kernel_bench.cu with nvcc alone (no CMake: a GPU host may
# lack the project's Debian dev packages; it links only optimized/ kernels, core/ggml_types and cuBLAS),
# run its correctness gate and timings, run the torch peers (bench/torch_peers.py) on the same shapes,
# merge the two (bench/merge_bench.py) and print the table last. Everything lands under $OUT:
# mlaconf_<family>.json (one kernel_bench process per family), torch.json, merged.json, table.md, the
# logs and the ptxas resource reports. Where a suites/gpu binary was carried along (GPU_TESTS, default
# build/gpu_tests_stripped), its kernel cases run first (gpu_tests.log).
#   OUT=/some/dir bash bench/gpu_kernel_bench.sh          (BENCH_ARCH=90 by default; 120 for RTX 50xx)
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-$(mktemp -d)}"
mkdir -p "$OUT"
NVCC="${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}"
ARCH="${BENCH_ARCH:-90}"
B=build-bench-sm$ARCH
mkdir -p "$B"
SRCS="bench/kernel_bench.cu optimized/sparse_mla.cu optimized/sparse_mla_simt.cu optimized/gemv.cu optimized/gemv_blocks.cu optimized/gemv_float.cu optimized/gemv_mma.cu optimized/gemv_mma_x.cu
      optimized/indexer_scores.cu optimized/indexer_topk.cu optimized/indexer_select.cu optimized/dequant.cu
      optimized/runtime.cu optimized/faults.cu optimized/ops.cu optimized/paged.cu optimized/route.cu"
FLAGS="-std=c++20 -O3 -I. --expt-relaxed-constexpr -lineinfo --fmad=true -gencode arch=compute_$ARCH,code=sm_$ARCH"
stale=0
[ -x "$B/kernel_bench" ] || stale=1
for f in $SRCS core/ggml_types.cpp optimized/route_host.cpp optimized/*.cuh optimized/*.h optimized/*.inc core/*.h; do
  [ "$f" -nt "$B/kernel_bench" ] && stale=1
done
if [ $stale = 1 ]; then
  echo "building $B/kernel_bench (sm_$ARCH) ..."
  t0=$(date +%s)
  pids=()
  for f in $SRCS; do
    n=$(basename "$f")
    "$NVCC" $FLAGS -Xptxas -v -c "$f" -o "$B/$n.o" > "$OUT/ptxas_$n.log" 2>&1 &
    pids+=($!)
  done
  g++ -std=c++20 -O2 -I. -c core/ggml_types.cpp -o "$B/ggml_types.o" &
  pids+=($!)
  g++ -std=c++20 -O2 -I. -c optimized/route_host.cpp -o "$B/route_host.o" &  # route.cu's argument check
  pids+=($!)
  fail=0
  for p in "${pids[@]}"; do wait "$p" || fail=1; done
  if [ $fail = 1 ]; then
    grep -h -B2 -A5 "error" "$OUT"/ptxas_*.log | head -60
    echo "gpu_kernel_bench: build failed"
    exit 2
  fi
  "$NVCC" -o "$B/kernel_bench" "$B"/*.o -lcublas || { echo "gpu_kernel_bench: link failed"; exit 2; }
  echo "built in $(( $(date +%s) - t0 )) s"
fi
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.draw,temperature.gpu --format=csv > "$OUT/gpu.csv" 2>&1
# The suites/gpu kernel cases, where a binary built elsewhere was carried here (docs/CUDA.md says how).
GPU_TESTS="${GPU_TESTS:-build/gpu_tests_stripped}"
if [ -x "$GPU_TESTS" ]; then
  LD_LIBRARY_PATH="/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}" "$GPU_TESTS" \
    --gtest_filter='*sparse_mla*:*indexer*:*topk*:*gemv*:*apply_wuv*' > "$OUT/gpu_tests.log" 2>&1
  echo "suites/gpu kernel cases: exit $? ($(grep -c '^\[       OK' "$OUT/gpu_tests.log") ok)"
  grep -E "^\[  FAILED|NMSE" "$OUT/gpu_tests.log" | head -60 > "$OUT/gpu_tests_summary.txt"
fi
# One process per kernel family: a kernel that faults cannot take the others' timings with it.
rcs=""
for fam in sparse_mla indexer gemv argmax; do
  "$B/kernel_bench" --only "$fam" --json "$OUT/mlaconf_$fam.json" > "$OUT/mlaconf_$fam.log" 2>&1
  rcs="$rcs $fam=$?"
done
if python3 -c "import torch" 2>/dev/null; then
  python3 bench/torch_peers.py --json "$OUT/torch.json" > "$OUT/torch.log" 2>&1 || { tail -20 "$OUT/torch.log"; echo "torch peers failed"; }
else
  echo "no torch here: peers skipped"
fi
cat "$OUT/gpu.csv"
[ -f "$OUT/gpu_tests_summary.txt" ] && grep -E "FAILED" "$OUT/gpu_tests_summary.txt" | head -20
grep -h "^device" "$OUT/mlaconf_sparse_mla.log"
grep -h "^check\|^measure\|^FAILED\|error" "$OUT"/mlaconf_*.log
echo "kernel_bench exits:$rcs"
python3 bench/merge_bench.py "$OUT"/mlaconf_sparse_mla.json "$OUT"/mlaconf_indexer.json "$OUT"/mlaconf_gemv.json "$OUT"/mlaconf_argmax.json \
  --torch "$OUT/torch.json" --json "$OUT/merged.json" --md "$OUT/table.md"
