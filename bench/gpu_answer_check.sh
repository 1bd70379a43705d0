#!/usr/bin/env bash
# On a CUDA machine, every GPU-side check of op-level replay in one command:
#   answer --backend cuda then compare, on the committed fixture (tiny, synth --seed 1), on a model with
#   exact top-k ties (1 indexer head) and on a glm-dsa stress model (6 heads, 2 indexer heads, top-k 32,
#   group-limited routing); then each fault of optimized/faults.h, which must fail and be named as the
#   first failing op by the op it breaks. Prints one table row per run and, for the clean runs, the worst
#   NMSE / max_rel per op (the measured error of a correct CUDA backend, for docs/TOLERANCES.md).
#   bench/gpu_answer_check.sh [build dir]        exit 0 when every row is as expected, 1 otherwise
. "$(dirname "$0")/common.sh"
bench_start "${1:-build}" || exit 2
bench_cli_built "$B" || exit 2
T="${OUT:-$(mktemp -d)}"
mkdir -p "$T"

# Subjects: model + reference f64 fixture.
"$M" synth --seed 1 -o "$T/tiny.gguf" >/dev/null || exit 2
cp fixtures/data/tiny-seed1.h5 "$T/tiny.h5"
"$M" synth --seed 5 --indexer-heads 1 --top-k 32 --n-head 6 --layers 2 --dense-lead 1 -o "$T/ties.gguf" >/dev/null || exit 2
"$M" capture --quiet --model "$T/ties.gguf" --layers all --random-tokens 120 --seed 3 --decode-steps 1 --precision f64 --out "$T/ties.h5" || exit 2
"$M" synth --seed 7 --n-head 6 --indexer-heads 2 --top-k 32 --experts 16 --experts-used 4 --expert-groups 4 \
  --groups-used 2 --layers 3 --dense-lead 1 -o "$T/stress.gguf" >/dev/null || exit 2
"$M" capture --quiet --model "$T/stress.gguf" --layers all --random-tokens 90 --seed 3 --decode-steps 2 --precision f64 --out "$T/stress.h5" || exit 2

bad=0
printf '%-8s %-16s %-8s %-9s %-18s %-18s %s\n' subject fault answer compare "first failing op" expected verdict
row() {  # subject fault expected-first-op ("" = pass)
  local s="$1" f="$2" want="$3" out="$T/$1-${2:-none}.h5" a c first verdict
  "$M" answer "$T/$s.h5" --model "$T/$s.gguf" --backend cuda --quiet ${f:+--fault "$f"} --out "$out" >"$out.answer.log" 2>&1
  a=$?
  if [ $a -eq 0 ]; then
    "$M" compare "$T/$s.h5" "$out" --json "$out.json" >"$out.compare.txt" 2>&1
    c=$?
    first="$(python3 -c 'import json,sys; f=json.load(open(sys.argv[1]))["first_failure"]; print(f["op"] if f else "")' "$out.json")"
  else
    c=-; first="-"
  fi
  if [ -z "$want" ]; then [ "$c" = 0 ] && verdict=ok || verdict=WRONG; else [ "$c" = 1 ] && [ "$first" = "$want" ] && verdict=ok || verdict=WRONG; fi
  [ "$verdict" = ok ] || bad=1
  printf '%-8s %-16s %-8s %-9s %-18s %-18s %s\n' "$s" "${f:-none}" "$a" "$c" "${first:-none}" "${want:-none (pass)}" "$verdict"
}
row tiny "" ""
row ties "" ""
row stress "" ""
row tiny dense-attention attn_latent_out
row tiny inject-overflow q_a
row tiny no-lse-merge attn_latent_out
row ties topk-upper-tie indexer_topk

echo
echo "clean runs: worst nmse / max_rel per op (f16 bounds: nmse 1e-4, max_rel 2e-2)"
for s in tiny ties stress; do
  python3 - "$T/$s-none.h5.json" "$s" <<'EOF' || echo "$s: (python3 not available or no report)"
import json, sys
d = json.load(open(sys.argv[1]))
w = {}
for x in d["datasets"]:
    if x.get("verdict") in ("pass", "fail") and "nmse" in x:
        a = w.setdefault(x["op"], [0.0, 0.0])
        a[0] = max(a[0], x["nmse"]); a[1] = max(a[1], x["max_rel"])
print(sys.argv[2] + ": " + ", ".join(f"{k} {v[0]:.2e}/{v[1]:.2e}" for k, v in sorted(w.items(), key=lambda kv: -kv[1][0])))
EOF
done
echo "files: $T"
exit $bad
