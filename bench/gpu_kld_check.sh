#!/usr/bin/env bash
# On a CUDA machine: the corpus-level logits check of issue 14 in one command, and the figures its bound
# comes from (docs/KLD.md).
#
#   bash bench/gpu_kld_check.sh [DIR]          DIR: a CUDA build (DIR/tools/mlaconf or DIR/mlaconf); default build
#   MLACONF_CLI=/path/to/mlaconf bash bench/gpu_kld_check.sh     (or name the binary directly)
#   MLACONF_SHARED_DIR: the folder holding models/glm-dsa-tiny.gguf (default ../shared)
#   OUT=dir keeps the JSON reports (default: a temporary folder, printed at the end)
#
# Runs, on the tiny model over data/corpus/plain-prose.txt with the default window (512 tokens, six
# windows; index_topk 64), each against the reference in f64 (on the CPU):
#   1. kld --backend cuda                          the CUDA pipeline (f16 storage, f32 accumulation)
#   2. kld --backend cuda --fault dense-attention  the planted fault: must be far outside the bound
#   3. kld --backend reference --precision f32     the CPU reference in f32, for scale
# and prints, for all positions and for positions >= index_topk, the figures of llama-perplexity
# --kl-divergence (Mean KLD ± sem, Median, 99.0%, Maximum, RMS Δp, Same top p), then the bound the
# suite would use (10x the clean Mean KLD, rounded up to one significant digit) and the fault's
# separation from it. The suite's cases are generation.kld(backend=cuda,...) and
# generation.kld_fault(fault=dense_attention,backend=cuda,...) in suites/generation/test_cli_kld_gpu.cpp
# (kCudaMeanKldBound). Exit 0 when the fault's Mean KLD is at least 10x that bound, 1 otherwise, 2 when
# something could not run (3 from mlaconf: no CUDA here).
set -uo pipefail
cd "$(dirname "$0")/.."
B="${1:-build}"
M="${MLACONF_CLI:-}"
. bench/common.sh
if [ -z "$M" ]; then M=$(bench_bin "$B" tools/mlaconf) || { echo "(or set MLACONF_CLI)"; exit 2; }; fi
[ -x "$M" ] || { echo "missing $M (MLACONF_CLI)"; exit 2; }
TINY="${MLACONF_SHARED_DIR:-../shared}/models/glm-dsa-tiny.gguf"
[ -s "$TINY" ] || { echo "missing $TINY (set MLACONF_SHARED_DIR): the suite's bound is for this model"; exit 2; }
CORPUS=data/corpus/plain-prose.txt
OUT="${OUT:-$(mktemp -d)}"
mkdir -p "$OUT"
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version --format=csv,noheader

run() {  # name, then the kld arguments
  local name="$1"; shift
  local t0=$(date +%s)
  "$M" kld --model "$TINY" --text-file "$CORPUS" --json "$@" >"$OUT/$name.json" 2>"$OUT/$name.err"
  local rc=$?
  echo "$name: exit $rc, $(( $(date +%s) - t0 )) s"
  if [ $rc -ne 0 ]; then cat "$OUT/$name.err"; exit $([ $rc -eq 3 ] && echo 3 || echo 2); fi
}
run cuda --backend cuda
run cuda-dense-attention --backend cuda --fault dense-attention
run reference-f32 --backend reference --precision f32

python3 - "$OUT" <<'EOF'
import json, math, sys
out = sys.argv[1]
runs = [(n, json.load(open(f"{out}/{n}.json"))) for n in ("cuda", "cuda-dense-attention", "reference-f32")]
print()
print(f"{'run':22} {'positions':16} {'Mean KLD':>22} {'Median KLD':>11} {'99.0% KLD':>11} {'Max KLD':>11} {'RMS Δp %':>10} {'Same top p %':>12}")
for name, j in runs:
    for part in ("all", "beyond_topk"):
        s = j[part]; k = s["kld"]
        where = "all" if part == "all" else f">= topk {j['index_topk']}"
        print(f"{name:22} {where + ' (' + str(s['positions']) + ')':16} {k['mean']:>11.4g} ± {k['stderr']:<8.2g} {k['median']:>11.4g} "
              f"{k['p99']:>11.4g} {k['max']:>11.4g} {100 * s['delta_p']['rms']:>10.4g} {100 * s['same_top']['p']:>12.4f}")
    print(f"{'':22} test: {j['test']}, ctx {j['ctx']} x {j['windows']} windows, seconds truth {j['seconds']['truth']:.1f} test {j['seconds']['test']:.1f}")
clean = runs[0][1]["all"]["kld"]["mean"]
fault = runs[1][1]["all"]["kld"]["mean"]
def round_up(x):  # one significant digit, upwards
    if x <= 0: return 0.0
    e = math.floor(math.log10(x)); m = math.ceil(x / 10 ** e - 1e-12)
    return m * 10.0 ** e
bound = round_up(10 * clean)
print()
print(f"suggested kCudaMeanKldBound (10x the clean Mean KLD {clean:.4g}): {bound:.1g} nats")
print(f"dense-attention Mean KLD {fault:.4g} = {fault / bound if bound else float('inf'):.3g}x that bound (needs >= 10x)")
sys.exit(0 if bound > 0 and fault >= 10 * bound else 1)
EOF
rc=$?
echo "reports: $OUT"
exit $rc
