#!/usr/bin/env bash
# On a CUDA machine: what the settings branch (issue 39 item 3: KernelConfig, retired variants, kernel files split)
# needs a GPU to confirm. Needs DIR/tools/mlaconf and DIR/suites/gpu/mlaconf_gpu_tests of the default preset
# (`cmake --build build --target mlaconf mlaconf_gpu_tests mlaconf_kernel_bench`).
#
#   bench/gpu_settings_check.sh [DIR, default build]      (MLACONF_SHARED_DIR as bench/gpu_suite_check.sh)
#
# 1. The whole GPU suite (bench/gpu_suite_check.sh): the GEMV suites now pin their kernels by argument
#    (GemvKernel::Mma / Simt), batch.* and model.* through PipelineOptions, sparse_mla.* runs 16 / 32 heads per CTA,
#    the indexer's kernels live in three files.
# 2. The config reaches the pipeline: `bench --batch` prints it and writes it in --json; MLACONF_CUDA_BATCH_INVARIANT=0
#    and --kernel-config batch_invariant=0 give the same config; a bad value and a retired variable exit 2 in one
#    line. Exit 0 when all hold, 1 otherwise, 2 when it could not run.
. "$(dirname "$0")/common.sh"
bench_start "${1:-build}" M=tools/mlaconf || exit 2
fail=0
bash bench/gpu_suite_check.sh "$B" || fail=1

W="$(mktemp -d)"
trap 'rm -rf "$W"' EXIT
"$M" synth --seed 1 -o "$W/tiny.gguf" >/dev/null || exit 2
run_bench() { "$M" bench --model "$W/tiny.gguf" --backend cuda --batch 1,4 --prompt-tokens 8 --decode-steps 4 --json "$@"; }
field() { python3 -c 'import json,sys; print(json.loads(sys.stdin.read())["kernel_config"][sys.argv[1]])' "$1"; }
a=$(run_bench | field batch_invariant) || { echo "bench --batch failed"; exit 2; }
b=$(MLACONF_CUDA_BATCH_INVARIANT=0 run_bench | field batch_invariant)
c=$(run_bench --kernel-config batch_invariant=0,gemv=mma | field batch_invariant)
g=$(run_bench --kernel-config gemv=mma | field gemv)
echo "batch_invariant: default $a, environment 0 -> $b, --kernel-config 0 -> $c; gemv=mma -> $g"
[ "$a" = 1 ] && [ "$b" = 0 ] && [ "$c" = 0 ] && [ "$g" = mma ] || { echo "FAIL: the config did not reach bench"; fail=1; }
for env in MLACONF_CUDA_GRAPH=yes MLACONF_MMA_XSMEM=0; do
  err=$(env "$env" "$M" bench --model "$W/tiny.gguf" --backend cuda --batch 1 2>&1 >/dev/null); rc=$?
  lines=$(printf '%s\n' "$err" | grep -c .)
  echo "$env: exit $rc, $lines line(s): $err"
  [ "$rc" = 2 ] && [ "$lines" = 1 ] || { echo "FAIL: $env must exit 2 in one line"; fail=1; }
done
exit $fail
