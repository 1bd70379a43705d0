#!/usr/bin/env python3
"""Merges kernel_bench's JSON files (mlaconf; one per kernel family, each run in its own process) with
torch_peers.py's JSON (torch): every mlaconf row gets its peer's time and the ratio torch_us / mlaconf_us
(> 1: mlaconf is faster). Rows are matched by name (",hpc=N" / ",split=N" variants and the earlier versions'
shapes, ",grid=v11" / ",passes=16x" / ",cta=v13" / ",xsmem=0" / ",xwarp=0", match their base case; "indexer_select(...)", the decode step's call, matches "indexer(...)": the same scores + top-k).
Writes the merged JSON and prints a markdown table.

    python3 bench/merge_bench.py MLACONF.json [MLACONF2.json ...] --torch TORCH.json --json MERGED.json [--md TABLE.md]
"""
import argparse
import json
import re
import sys

from atomic_write import write_atomic


def peer_name(name):
    """The torch row an mlaconf row is compared with."""
    return re.sub(r"^indexer_select\(", "indexer(", re.sub(r",(hpc|split|xsmem|xwarp)=\d+|,(grid|passes|cta)=(v\d+|\d+x)", "", name))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("mlaconf", nargs="+")
    ap.add_argument("--torch", required=True)
    ap.add_argument("--json", required=True)
    ap.add_argument("--md")
    a = ap.parse_args()
    m = None
    for path in a.mlaconf:  # a family whose process died leaves no file: its rows are missing
        try:
            part = json.load(open(path))
        except (OSError, ValueError) as e:
            print(f"merge_bench: skipping {path}: {e}", file=sys.stderr)
            continue
        if m is None:
            m = part
        else:
            m["rows"] += [r for r in part["rows"] if not r["name"].startswith(("copy_bandwidth", "fp16_matmul"))]
    if m is None:
        print("merge_bench: no mlaconf results", file=sys.stderr)
        return 1
    try:
        t = json.load(open(a.torch))
    except (OSError, ValueError) as e:
        print(f"merge_bench: no torch results ({e}): ratios left empty", file=sys.stderr)
        t = dict(rows=[])
    peers = {r["name"]: r for r in t["rows"]}
    lines = ["| case | mlaconf us | GB/s | TFLOP/s | % of floor | torch us | torch / mlaconf |",
             "|---|---|---|---|---|---|---|"]
    for r in m["rows"]:
        p = peers.get(peer_name(r["name"]))
        r["peer_us"] = p["us"] if p else None
        r["ratio_vs_peer"] = (p["us"] / r["us"]) if p else None
        ratio = f"{r['ratio_vs_peer']:.2f}x" if p else "-"
        peer = f"{p['us']:.1f}" if p else "-"
        lines.append(f"| {r['name']} | {r['us']:.1f} | {r['gbs']:.0f} | {r['tflops']:.1f} | {r['pct_floor']:.1f}% | {peer} | {ratio} |")
    merged = dict(mlaconf=m, torch=t)
    write_atomic(a.json, json.dumps(merged, indent=1))
    table = "\n".join(lines)
    if a.md:
        write_atomic(a.md, f"copy bandwidth {m['copy_gbs']:.0f} GB/s, fp16 matmul {m['fp16_tflops']:.0f} TFLOP/s "
                           f"(mlaconf run); torch run: {t.get('copy_gbs', 0):.0f} GB/s, {t.get('fp16_tflops', 0):.0f} TFLOP/s\n\n"
                           + table + "\n")
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
