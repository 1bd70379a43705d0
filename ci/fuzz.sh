#!/usr/bin/env bash
# The fuzzers (clang, libFuzzer, ASan, UBSan): fuzz/fuzz_gguf.cpp (the GGUF parser),
# fuzz/fuzz_fixture.cpp (the fixture reader, the HDF5 probe and the judge) and fuzz/fuzz_engine_run.cpp
# (another engine's run, `kld --against`).
#   ci/fuzz.sh                builds them and runs their seeds through them once
#   ci/fuzz.sh --short        ... then fuzzes each for about 60 s (CI: ci/test.sh calls this)
#   ci/fuzz.sh --long SECONDS ... then fuzzes each for SECONDS
#   --target gguf|fixture|engine_run   (after the above) only that one
# Exits non-zero when an input crashes a target (the input is kept under build-fuzz/fuzz-artifacts/).
# A crash inside libhdf5 is not one: the probe (fixtures/h5_probe.h) turns it into a refusal. When libhdf5
# asks for more than -malloc_limit_mb in the probe's child, libFuzzer's hook in that child still writes an
# oom-* file there before the child ends; the exit status alone is the verdict.
# Self-test of the crash path: put a file starting "CRASH" in build-fuzz/fuzz-corpus and run with
# MLACONF_FUZZ_SELFTEST=1: the script must exit 1.
# Where clang's libFuzzer runtime is missing it says so and exits 0 (not supported, not a failure).
set -euo pipefail
cd "$(dirname "$0")/.."
secs=0
targets="gguf fixture engine_run"
while [ $# -gt 0 ]; do
  case "$1" in
    --short) secs=60; shift ;;
    --long) secs="${2:?ci/fuzz.sh: --long needs SECONDS}"; shift 2 ;;
    --target) targets="${2:?ci/fuzz.sh: --target needs gguf or fixture}"; shift 2 ;;
    *) echo "usage: ci/fuzz.sh [--short | --long SECONDS] [--target gguf|fixture|engine_run]" >&2; exit 2 ;;
  esac
done
case "$targets" in "gguf fixture engine_run" | gguf | fixture | engine_run) ;; *) echo "ci/fuzz.sh: unknown target '$targets'" >&2; exit 2 ;; esac
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
build_targets=()
for t in $targets; do build_targets+=("fuzz_$t"); done
[[ " $targets " == *" gguf "* ]] && build_targets+=(fuzz_corpus_gen)
cmake --build "$B" --target "${build_targets[@]}" -j "$(nproc)"
mkdir -p "$B/fuzz-artifacts"

# fuzz_one NAME SEEDS OPTIONS...: the seeds once, then SECONDS of fuzzing; exit 1 on a finding.
fuzz_one() {
  local name=$1 seeds=$2
  shift 2
  local bin="$B/fuzz/fuzz_$name" corpus="$B/fuzz-corpus"
  [ "$name" = gguf ] || corpus+="-$name"
  local common=("$@" -artifact_prefix="$B/fuzz-artifacts/")
  mkdir -p "$corpus"
  echo "ci/fuzz.sh: $name: running the seeds once"
  "$bin" "${common[@]}" -runs=0 "$seeds" 2>&1 | tail -n 3
  [ "$secs" -gt 0 ] || return 0
  echo "ci/fuzz.sh: $name: fuzzing for ${secs} s"
  local log="$B/fuzz-last-$name.log" rc
  set +e
  "$bin" "${common[@]}" -max_total_time="$secs" -print_final_stats=1 "$corpus" "$seeds" >"$log" 2>&1
  rc=$?
  set -e
  grep -E "^(stat::|Done|INFO: Loaded|==[0-9]+==ERROR|SUMMARY)" "$log" | tail -n 12 || true
  if [ $rc -ne 0 ]; then
    echo "ci/fuzz.sh: $name: the fuzzer found a crash (exit $rc); see $log and $B/fuzz-artifacts/" >&2
    tail -n 40 "$log" >&2
    return 1
  fi
}

status=0
if [[ " $targets " == *" gguf "* ]]; then
  rm -rf "$B/fuzz-seeds"
  "$B/fuzz/fuzz_corpus_gen" "$B/fuzz-seeds"
  fuzz_one gguf "$B/fuzz-seeds" -timeout=20 -rss_limit_mb=2048 || status=1
fi
if [[ " $targets " == *" fixture "* ]]; then
  # Seeds: real fixtures, small (made by fuzz/make_fixture_seeds.sh). The timeout is above the probe's own
  # limits (20 s of CPU, 60 s of wall time), so that a loop inside libhdf5 is the probe's refusal, not
  # a finding; libhdf5 leaks on damaged files (not ours to fix), so leaks are not findings here.
  fuzz_one fixture fuzz/fixture_seeds -timeout=90 -rss_limit_mb=2048 -malloc_limit_mb=1024 -detect_leaks=0 || status=1
fi
if [[ " $targets " == *" engine_run "* ]]; then
  # Seeds: the committed engine runs (real llama.cpp output, hand-made vLLM responses, prompt rows).
  fuzz_one engine_run suites/kld_against/data -timeout=20 -rss_limit_mb=2048 || status=1
fi
[ $status -eq 0 ] && echo "ci/fuzz.sh: OK"
exit $status
