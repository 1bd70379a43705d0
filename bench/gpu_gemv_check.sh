#!/usr/bin/env bash
# On one CUDA GPU, in one command: the block-streaming dequant GEMV (optimized/gemv_blocks.cu) checked
# and timed.
#
#   bench/gpu_gemv_check.sh [DIR, default build]      (OUT=dir keeps the logs; default a temp dir)
#
# Needs the default preset built with CUDA: DIR/suites/gpu/mlaconf_gpu_tests and
# DIR/optimized/mlaconf_kernel_bench (`cmake --build build --target mlaconf_gpu_tests mlaconf_kernel_bench`),
# or DIR/mlaconf_gpu_tests and DIR/mlaconf_kernel_bench side by side (stripped copies carried to a GPU
# machine). Steps:
#  1. gtest gemv_blocks.* (9 types, shapes off every tile multiple, B = 1, 3, 8, 17, expert ids, per-head;
#     each output against the reference dequantizer x x in double, bit for bit against the documented
#     fp32 order, and each batch entry bit-identical to the same x alone; negative controls) and the
#     older *gemv* and apply_wuv cases (suites/gpu/test_ops.cpp), which now run the new kernel for these types;
#  2. kernel_bench --only gemv: its correctness gate (Q4_K, and Q6_K / Q8_0 / Q5_K at B = 3 against
#     float64 and against B = 1 bit for bit), then the timings (Q6_K head 154880 x 6144 at B = 1 and 8,
#     Q6_K 16384 x 6144, Q6_K / Q8_0 / Q5_K 6144 x 16384, each at B = 1 and 8; the Q4_K cases);
#  3. where torch imports: the fp16 F.linear peers of the same shapes (bench/torch_peers.py --only gemv)
#     and the merged table (bench/merge_bench.py).
# Exit 1 if a test or check failed. About 2-3 minutes on an H200 host (not measured yet).
. "$(dirname "$0")/common.sh"
bench_start "${1:-build}" G=suites/gpu/mlaconf_gpu_tests K=optimized/mlaconf_kernel_bench || exit 2
OUT="${OUT:-$(mktemp -d)}"
mkdir -p "$OUT"
export LD_LIBRARY_PATH="/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
fail=0
t0=$(date +%s)
bench_gpu_state

echo "== gtest *gemv*:*apply_wuv*"
"$G" --gtest_filter='*gemv*:*apply_wuv*' >"$OUT/gtest-gemv.log" 2>&1 || fail=1
grep -E "^\[  (PASSED|FAILED)|^\[  FAILED|Failure|differ|off the emulated" "$OUT/gtest-gemv.log" | grep -v " 0 outputs off" | head -80
echo "   worst max|err|/sum|wx| over the cases: $(grep -o 'sum|wx| [0-9.e+-]*' "$OUT/gtest-gemv.log" | awk '{print $2}' | sort -g | tail -1)"

echo "== kernel_bench --only gemv"
"$K" --only gemv --json "$OUT/mlaconf_gemv.json" 2>&1 | tee "$OUT/kernel_bench-gemv.log" | grep -vE "^$"
[ "${PIPESTATUS[0]}" -eq 0 ] || fail=1

if python3 -c "import torch" 2>/dev/null; then
  echo "== torch peers (fp16 F.linear)"
  python3 bench/torch_peers.py --only gemv --json "$OUT/torch.json" >"$OUT/torch.log" 2>&1 || { tail -20 "$OUT/torch.log"; fail=1; }
  grep "^gemv" "$OUT/torch.log"
  python3 bench/merge_bench.py "$OUT/mlaconf_gemv.json" --torch "$OUT/torch.json" --json "$OUT/merged.json" \
    --md "$OUT/table.md" && cat "$OUT/table.md"
else
  echo "no torch here: peers skipped"
fi
echo "== $(( $(date +%s) - t0 )) s; logs in $OUT"
[ $fail -eq 0 ] && echo "ALL OK" || echo "SOMETHING FAILED"
exit $fail
