#!/usr/bin/env bash
# The GGUF-parser fuzzer (fuzz/fuzz_gguf.cpp; clang, libFuzzer, ASan, UBSan).
#   ci/fuzz.sh                builds it and runs the hostile corpus + a valid model through it once
#   ci/fuzz.sh --short        ... then fuzzes for about 60 s (CI: ci/test.sh calls this)
#   ci/fuzz.sh --long SECONDS ... then fuzzes for SECONDS
# Exits non-zero when an input crashes the parser (the input is kept under build-fuzz/fuzz-artifacts/).
# Self-test of the crash path: put a file starting "CRASH" in build-fuzz/fuzz-corpus and run with
# MLACONF_FUZZ_SELFTEST=1: the script must exit 1.
# Where clang's libFuzzer runtime is missing it says so and exits 0 (not supported, not a failure).
set -euo pipefail
cd "$(dirname "$0")/.."
secs=0
case "${1:-}" in
  "") ;;
  --short) secs=60 ;;
  --long) secs="${2:?ci/fuzz.sh: --long needs SECONDS}" ;;
  *) echo "usage: ci/fuzz.sh [--short | --long SECONDS]" >&2; exit 2 ;;
esac
B=build-fuzz
probe=$(mktemp -d)
trap 'rm -rf "$probe"' EXIT
echo 'extern "C" int LLVMFuzzerTestOneInput(const unsigned char*, unsigned long) { return 0; }' > "$probe/p.cpp"
if ! command -v clang++ >/dev/null 2>&1 || ! clang++ -fsanitize=fuzzer,address,undefined "$probe/p.cpp" -o "$probe/p" 2>/dev/null; then
  echo "ci/fuzz.sh: not supported: clang++ with the libFuzzer runtime is not installed (apt: clang libclang-rt-14-dev); skipped"
  exit 0
fi
export CCACHE_DIR="${CCACHE_DIR:-${HOME:-/tmp}/.cache/mlaconf-ccache}"
cmake --preset fuzz >/dev/null
cmake --build "$B" --target fuzz_gguf fuzz_corpus_gen -j "$(nproc)"
rm -rf "$B/fuzz-seeds"
"$B/fuzz/fuzz_corpus_gen" "$B/fuzz-seeds"
mkdir -p "$B/fuzz-artifacts" "$B/fuzz-corpus"
common=(-timeout=20 -rss_limit_mb=2048 -artifact_prefix="$B/fuzz-artifacts/")
echo "ci/fuzz.sh: running the seed corpus once"
"$B/fuzz/fuzz_gguf" "${common[@]}" -runs=0 "$B/fuzz-seeds" 2>&1 | tail -n 3
if [ "$secs" -gt 0 ]; then
  echo "ci/fuzz.sh: fuzzing for ${secs} s"
  log="$B/fuzz-last.log"
  set +e
  "$B/fuzz/fuzz_gguf" "${common[@]}" -max_total_time="$secs" -print_final_stats=1 \
    "$B/fuzz-corpus" "$B/fuzz-seeds" >"$log" 2>&1
  rc=$?
  set -e
  grep -E "^(stat::|Done|INFO: Loaded|==[0-9]+==ERROR|SUMMARY)" "$log" | tail -n 12 || true
  if [ $rc -ne 0 ]; then
    echo "ci/fuzz.sh: the fuzzer found a crash (exit $rc); see $log and $B/fuzz-artifacts/" >&2
    tail -n 40 "$log" >&2
    exit 1
  fi
fi
echo "ci/fuzz.sh: OK"
