#!/usr/bin/env bash
# On a CUDA machine: capture the committed fixture's case with the CUDA pipeline (`capture --backend
# cuda`) and judge it against the committed reference fixture with the f16 tolerances. Prints the
# compare table. Not a test (CI has no GPU); the GPU suites cover the pipeline itself.
#   bench/gpu_capture_check.sh [build dir]
. "$(dirname "$0")/common.sh"
bench_start "${1:-build-gpu}" || exit 2
bench_cli_built "$B" || exit 2
T="$(mktemp -d)"
"$M" synth --seed 1 -o "$T/tiny-seed1.gguf" >/dev/null || exit 2
args="$(sed 's/--precision f64//' fixtures/data/capture_args.txt)"
# shellcheck disable=SC2086
/usr/bin/time -f "cuda capture: %e s wall" "$M" capture --quiet --backend cuda --model "$T/tiny-seed1.gguf" $args --out "$T/cuda.h5"
rc=$?
[ $rc -eq 0 ] || { echo "capture --backend cuda: exit $rc"; exit $rc; }
"$M" compare fixtures/data/tiny-seed1.h5 "$T/cuda.h5" --json "${OUT:-$T}/cuda-vs-ref.json" --plot "${OUT:-$T}/cuda-vs-ref.png"
echo "compare exit $?"
