# Sourced by bench/gpu_*_check.sh. bench_bin: where a binary is, in a CMake build folder (build/tools/mlaconf, ...)
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
