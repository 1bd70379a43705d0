# Sourced by bench/gpu_*_check.sh: where a binary is, in a CMake build folder (build/tools/mlaconf, ...)
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
