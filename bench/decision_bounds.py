#!/usr/bin/env python3
"""Worst error per op of a correct backend, from compare --json reports (bench/gpu_decisions_check.sh).

  decision_bounds.py DIR     reads DIR/*-cudaf.json, *-cuda.json (f16) and *-f32f.json (f32)

Prints a markdown table: per precision and op, the worst nmse, max_rel and 1-cosine over every model,
case and layer (judged rows only), with the model and case where it occurred. docs/TOLERANCES.md sets
each bound at most 10x above these figures.
"""
import glob
import json
import os
import sys


def main():
    d = sys.argv[1]
    worst = {}  # (precision, op) -> dict
    for path in sorted(glob.glob(os.path.join(d, "*.json"))):
        base = os.path.basename(path)
        if base.endswith("-cudaf.json") or base.endswith("-cuda.json"):
            prec = "f16"
        elif base.endswith("-f32f.json"):
            prec = "f32"
        else:
            continue
        try:
            j = json.load(open(path))
        except (OSError, ValueError):
            continue
        model = base.split("-")[0]
        for x in j.get("datasets", []):
            if "nmse" not in x or x.get("verdict") not in ("pass", "fail") or x.get("n", 0) == 0:
                continue
            key = (prec, x["op"])
            w = worst.setdefault(key, {"nmse": 0.0, "max_rel": 0.0, "one_minus_cos": 0.0, "where": ""})
            for k, v in (("nmse", x.get("nmse")), ("max_rel", x.get("max_rel")), ("one_minus_cos", x.get("one_minus_cosine"))):
                if v is not None and v > w[k]:
                    w[k] = v
                    if k == "nmse":
                        w["where"] = "%s %s layer %s" % (model, x["case"], x["layer"])
    print("| precision | op | worst nmse | worst max_rel | worst 1-cos | where (worst nmse) |")
    print("|---|---|---|---|---|---|")
    for (prec, op), w in sorted(worst.items()):
        print("| %s | %s | %.2e | %.2e | %.2e | %s |" % (prec, op, w["nmse"], w["max_rel"], w["one_minus_cos"], w["where"]))


if __name__ == "__main__":
    main()
