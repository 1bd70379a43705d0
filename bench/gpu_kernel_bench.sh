#!/usr/bin/env bash
# On a CUDA host, in one command: build bench/kernel_bench.cu with nvcc alone (no CMake: a GPU host may
# lack the project's Debian dev packages; it links only optimized/ kernels, core/ggml_types and cuBLAS),
# run its correctness gate and timings, run the torch peers (bench/torch_peers.py) on the same shapes,
# merge the two (bench/merge_bench.py) and print the table last. Everything lands under $OUT:
# mlaconf.json, torch.json, merged.json, table.md, the logs and the ptxas resource reports.
#   OUT=/some/dir bash bench/gpu_kernel_bench.sh          (BENCH_ARCH=90 by default; 120 for RTX 50xx)
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-$(mktemp -d)}"
mkdir -p "$OUT"
NVCC="${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}"
ARCH="${BENCH_ARCH:-90}"
B=build-bench-sm$ARCH
mkdir -p "$B"
SRCS="bench/kernel_bench.cu optimized/sparse_mla.cu optimized/gemv.cu optimized/indexer.cu optimized/dequant.cu
      optimized/runtime.cu optimized/faults.cu optimized/ops.cu"
FLAGS="-std=c++20 -O3 -I. --expt-relaxed-constexpr -lineinfo --fmad=true -gencode arch=compute_$ARCH,code=sm_$ARCH"
stale=0
[ -x "$B/kernel_bench" ] || stale=1
for f in $SRCS core/ggml_types.cpp optimized/*.cuh optimized/*.h optimized/*.inc core/*.h; do
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
"$B/kernel_bench" --json "$OUT/mlaconf.json" > "$OUT/mlaconf.log" 2>&1
rc=$?
if [ $rc != 0 ]; then
  tail -40 "$OUT/mlaconf.log"
  echo "gpu_kernel_bench: kernel_bench exit $rc"
  exit 1
fi
if python3 -c "import torch" 2>/dev/null; then
  python3 bench/torch_peers.py --json "$OUT/torch.json" > "$OUT/torch.log" 2>&1 || { tail -20 "$OUT/torch.log"; echo "torch peers failed"; }
else
  echo "no torch here: peers skipped"
fi
cat "$OUT/gpu.csv"
grep "^check\|^device" "$OUT/mlaconf.log"
grep -v "^check\|^device" "$OUT/mlaconf.log"
python3 bench/merge_bench.py "$OUT/mlaconf.json" "$OUT/torch.json" --json "$OUT/merged.json" --md "$OUT/table.md"
