#!/usr/bin/env bash
# On a CUDA machine: the whole GPU suite (mlaconf_gpu_tests) in one command, with timings.
#
#   bench/gpu_suite_check.sh [DIR, default build]
#     FILTER='gtest filter'   runs part of it (default: every case; e.g. FILTER='-split.*' skips the
#                             layer-split cases, which synthesize a 3.9-GB model)
#     OUT=dir                 keeps the log, the gtest JSON and the reproducers (default: a temp dir)
#
# Needs the default (CUDA) preset built: DIR/suites/gpu/mlaconf_gpu_tests and DIR/tools/mlaconf
# (`cmake --build build --target mlaconf mlaconf_gpu_tests`), or DIR/mlaconf_gpu_tests and DIR/mlaconf side
# by side (stripped copies carried to a GPU machine). Environment as bench/gpu_answer_check.sh and
# bench/gpu_split_check.sh: MLACONF_SHARED_DIR (the tiny model; else ../shared, else one synthesized with
# seed 1), MLACONF_CLI (the CLI the split cases call). Failing op cases write their reproducers under
# $OUT/repro (MLACONF_REPRO_DIR) and print the command that re-runs them.
# Prints per suite: cases passed / failed / skipped and seconds; the 15 slowest cases; every failure with
# its re-run command. Exit 0 when no case failed, 1 otherwise, 2 when it could not run.
. "$(dirname "$0")/common.sh"
bench_start "${1:-build}" G=suites/gpu/mlaconf_gpu_tests || exit 2
M=$(bench_bin "$B" tools/mlaconf 2>/dev/null) || M="$B/tools/mlaconf"  # optional: synthesizes a tiny model if ../shared lacks one
G="$(realpath "$G")"
W="$(mktemp -d)"
OUT="${OUT:-$W}"
mkdir -p "$OUT"

SHARED="${MLACONF_SHARED_DIR:-$(realpath ../shared 2>/dev/null || true)}"
if [ -z "$SHARED" ] || [ ! -s "$SHARED/models/glm-dsa-tiny.gguf" ]; then
  if [ -x "$M" ]; then
    SHARED="$W/shared"
    mkdir -p "$SHARED/models"
    "$M" synth --seed 1 -o "$SHARED/models/glm-dsa-tiny.gguf" >/dev/null || exit 2
    echo "tiny model synthesized (seed 1): $SHARED/models/glm-dsa-tiny.gguf"
  else
    echo "no tiny model and no $M to synthesize one: the model cases will skip"
  fi
fi
CLI="${MLACONF_CLI:-$( [ -x "$M" ] && realpath "$M" || echo "$M")}"

echo "== $G --gtest_filter='${FILTER:-*}'"
t0=$(date +%s)
MLACONF_SHARED_DIR="$SHARED" MLACONF_CLI="$CLI" MLACONF_REPRO_DIR="$OUT/repro" \
  "$G" --gtest_filter="${FILTER:-*}" --gtest_output="json:$OUT/gpu_tests.json" >"$OUT/gpu_tests.log" 2>&1
rc=$?
echo "   exit $rc after $(( $(date +%s) - t0 )) s; log $OUT/gpu_tests.log"
[ -s "$OUT/gpu_tests.json" ] || { echo "no JSON report (the binary crashed?); last lines of the log:"; tail -30 "$OUT/gpu_tests.log"; exit 2; }

python3 - "$OUT/gpu_tests.json" "$G" <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))
rows, cases = [], []
for s in d.get("testsuites", []):
    p = f = k = 0
    t = 0.0
    for c in s.get("testsuite", []):
        sec = float(c.get("time", "0s").rstrip("s") or 0)
        t += sec
        if c.get("failures"):
            f += 1
            status = "FAIL"
        elif c.get("result") == "SKIPPED":
            k += 1
            status = "skip"
        else:
            p += 1
            status = "pass"
        cases.append((sec, s["name"] + "." + c["name"], status, c.get("failures", [])))
    rows.append((s["name"], p, f, k, t))
print(f"{'suite':<20} {'pass':>5} {'fail':>5} {'skip':>5} {'seconds':>8}")
for r in rows:
    print(f"{r[0]:<20} {r[1]:>5} {r[2]:>5} {r[3]:>5} {r[4]:>8.1f}")
print(f"{'total':<20} {sum(r[1] for r in rows):>5} {sum(r[2] for r in rows):>5} {sum(r[3] for r in rows):>5} "
      f"{sum(r[4] for r in rows):>8.1f}")
print("\nslowest cases:")
for sec, name, status, _ in sorted(cases, reverse=True)[:15]:
    print(f"  {sec:7.2f} s  {status}  {name}")
fails = [c for c in cases if c[2] == "FAIL"]
if fails:
    print(f"\n{len(fails)} failing cases (re-run one with the command below; reproducers in $OUT/repro):")
    for _, name, _, fl in fails:
        first = fl[0].get("failure", "").strip().splitlines()
        print(f"  {name}\n    {first[0] if first else ''}\n    '{sys.argv[2]}' --gtest_filter='{name}'")
EOF
echo "files: $OUT"
[ "$rc" = 0 ] && echo "PASS" || echo "FAIL"
exit $(( rc == 0 ? 0 : 1 ))
