# Sourced by bench/gpu_*_check.sh.

# A check's start: strict mode (no -e: a check goes on past a failed step and reports it), the checkout's root
# as the working directory, B = the build folder, and each NAME=sub/path binary found in B (bench_bin) into NAME.
#   . "$(dirname "$0")/common.sh"
#   bench_start "${1:-build}" M=tools/mlaconf G=suites/gpu/mlaconf_gpu_tests || exit 2
bench_start() {
  set -uo pipefail
  cd "$(dirname "$0")/.." || return 2
  B="$1"
  shift
  local spec path
  for spec in "$@"; do
    path=$(bench_bin "$B" "${spec#*=}") || return 2
    printf -v "${spec%%=*}" '%s' "$path"
  done
}

# bench_bin: where a binary is, in a CMake build folder (build/tools/mlaconf, ...)
# or in a folder of stripped copies carried to a GPU machine (DIR/mlaconf, ...).
#   M=$(bench_bin "$DIR" tools/mlaconf) || exit 2
bench_bin() {
  local dir="$1" sub="$2" base
  base="$(basename "$sub")"
  if [ -x "$dir/$base" ]; then echo "$dir/$base"
  elif [ -x "$dir/$sub" ]; then echo "$dir/$sub"
  else echo "missing $dir/$sub: build the default (CUDA) preset first (bash ci/build.sh)" >&2; return 2
  fi
}

# mlaconf in a CMake build folder DIR, configured (CUDA for sm_90, no tests) and built there first when it is
# missing: for the checks that want nothing but the CLI. Sets M.
#   bench_cli_built "$DIR" || exit 2
bench_cli_built() {
  local dir="$1"
  if [ ! -x "$dir/tools/mlaconf" ]; then
    cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DMLACONF_TESTS=OFF -DCMAKE_CUDA_ARCHITECTURES=90 >/dev/null || return 2
    cmake --build "$dir" --target mlaconf -j"$(nproc)" 2>&1 | grep -E "error|FAILED" | head -20
  fi
  M="$dir/tools/mlaconf"
}

# The GPU's name, clocks, power and temperature at the start of a run, into OUT/gpu.csv (nothing without
# nvidia-smi).
bench_gpu_state() {
  nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,power.draw,temperature.gpu --format=csv >"$OUT/gpu.csv" 2>/dev/null || true
}

# The tiny model: MLACONF_SHARED_DIR's or ../shared's models/glm-dsa-tiny.gguf, else one synthesized with
# the same dims (seed 1) under WORKDIR. Sets SHARED and TINY.
#   bench_tiny_model "$M" "$W" || exit 2
bench_tiny_model() {
  local cli="$1" work="$2"
  SHARED="${MLACONF_SHARED_DIR:-$(realpath ../shared 2>/dev/null || true)}"
  TINY="$SHARED/models/glm-dsa-tiny.gguf"
  if [ -z "$SHARED" ] || [ ! -s "$TINY" ]; then
    SHARED="$work/shared"
    TINY="$SHARED/models/glm-dsa-tiny.gguf"
    mkdir -p "$SHARED/models"
    "$cli" synth --seed 1 -o "$TINY" >/dev/null || return 2
  fi
}

# The scratch folder W (its models and fixtures removed at exit, the logs kept), OUT (default W), fail=0, t0.
bench_workdir() {
  W="$(mktemp -d)"
  OUT="${OUT:-$W}"
  mkdir -p "$OUT"
  trap 'rm -rf "$W"/*.gguf "$W"/*.h5 "$W"/shared' EXIT
  fail=0
  t0=$(date +%s)
}
