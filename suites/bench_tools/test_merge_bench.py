#!/usr/bin/env python3
"""bench/merge_bench.py on made-up kernel_bench and torch_peers JSON (exit 0 pass, 1 fail; no GPU needed).

Two family files (the second repeats the copy and matmul rows, which must not be duplicated) and a third that
does not exist (a family whose process died: skipped). Torch has peers for two cases. Checked: each row's
peer time and ratio torch_us / mlaconf_us; a ",hpc=16" variant and ",xsmem=0" and ",xwarp=0" rows matched to their base case; the decode selection's
"indexer_select(...)" row matched to "indexer(...)"; a row without a peer
left empty; the markdown table; without the torch file the ratios stay empty and the exit is 0; without any
mlaconf file the exit is 1 and nothing is written.
"""
import json
import os
import subprocess
import sys
import tempfile

from checks import Checks


def row(name, us, gbs=1000.0, tflops=1.0, pct=50.0):
    return {"name": name, "kernel": "k", "note": "", "us": us, "bytes": 1, "flops": 1, "gbs": gbs, "tflops": tflops,
            "pct_floor": pct}


def main():
    tool = sys.argv[1]
    c = Checks("merge_bench")
    check = c.check

    with tempfile.TemporaryDirectory() as d:
        p = lambda n: os.path.join(d, n)
        head = [row("copy_bandwidth(1GiB d2d)", 500.0), row("fp16_matmul_rate(8192^3)", 1500.0)]
        fam1 = {"source": "mlaconf", "device": "H200", "copy_gbs": 4250.0, "fp16_tflops": 740.0,
                "rows": head + [row("gemv(type=Q4_K,rows=2048,cols=6144)", 11.0),
                                row("gemv(type=Q4_K,rows=576,cols=6144)", 7.5),
                                row("gemv(type=Q6_K,rows=154880,cols=6144,b=64,passes=16x)", 3076.5),
                                row("gemv(type=Q6_K,rows=154880,cols=6144,b=64,xsmem=0)", 2261.1),
                                row("gemv(type=Q4_K,rows=2048,cols=6144,xwarp=0)", 11.6)]}
        fam2 = {"source": "mlaconf", "device": "H200", "copy_gbs": 4250.0, "fp16_tflops": 740.0,
                "rows": head + [row("sparse_mla(B=64,hpc=16)", 105.0), row("indexer_select(B=1,L=131072,keys=f32)", 79.0)]}
        torch = {"source": "torch", "copy_gbs": 4240.0, "fp16_tflops": 730.0,
                 "rows": [row("gemv(type=Q4_K,rows=2048,cols=6144)", 14.3), row("sparse_mla(B=64)", 247.0),
                          row("gemv(type=Q6_K,rows=154880,cols=6144,b=64)", 1500.0),
                          row("indexer(B=1,L=131072,keys=f32)", 86.0)]}
        for n, j in (("fam1.json", fam1), ("fam2.json", fam2), ("torch.json", torch)):
            with open(p(n), "w") as f:
                json.dump(j, f)

        r = subprocess.run([sys.executable, tool, p("fam1.json"), p("fam2.json"), p("died.json"), "--torch", p("torch.json"),
                            "--json", p("merged.json"), "--md", p("table.md")], capture_output=True, text=True)
        check(r.returncode == 0, f"merge: exit {r.returncode}: {r.stderr}")
        check("skipping" in r.stderr and "died.json" in r.stderr, f"the missing family is not reported: {r.stderr!r}")
        merged = json.load(open(p("merged.json")))
        rows = {x["name"]: x for x in merged["mlaconf"]["rows"]}
        names = [x["name"] for x in merged["mlaconf"]["rows"]]
        check(names.count("copy_bandwidth(1GiB d2d)") == 1 and len(names) == 9, f"rows: {names}")
        g = rows.get("gemv(type=Q4_K,rows=2048,cols=6144)", {})
        check(g.get("peer_us") == 14.3 and abs(g.get("ratio_vs_peer", 0) - 14.3 / 11.0) < 1e-12, f"gemv peer: {g}")
        s = rows.get("sparse_mla(B=64,hpc=16)", {})
        check(s.get("peer_us") == 247.0 and abs(s.get("ratio_vs_peer", 0) - 247.0 / 105.0) < 1e-12, f"hpc variant: {s}")
        x = rows.get("indexer_select(B=1,L=131072,keys=f32)", {})
        check(x.get("peer_us") == 86.0 and abs(x.get("ratio_vs_peer", 0) - 86.0 / 79.0) < 1e-12, f"decode selection: {x}")
        v = rows.get("gemv(type=Q6_K,rows=154880,cols=6144,b=64,passes=16x)", {})
        check(v.get("peer_us") == 1500.0, f"an earlier version's shapes (,passes=16x) against the base case's peer: {v}")
        xs = rows.get("gemv(type=Q6_K,rows=154880,cols=6144,b=64,xsmem=0)", {})
        check(xs.get("peer_us") == 1500.0, f"a switch's row (,xsmem=0) against the base case's peer: {xs}")
        xw = rows.get("gemv(type=Q4_K,rows=2048,cols=6144,xwarp=0)", {})
        check(xw.get("peer_us") == 14.3, f"a switch's row (,xwarp=0) against the base case's peer: {xw}")
        n = rows.get("gemv(type=Q4_K,rows=576,cols=6144)", {})
        check(n.get("peer_us") is None and n.get("ratio_vs_peer") is None, f"no peer: {n}")
        md = open(p("table.md")).read()
        check("copy bandwidth 4250 GB/s" in md and "| gemv(type=Q4_K,rows=2048,cols=6144) | 11.0 |" in md and "| 1.30x |" in md
              and "| sparse_mla(B=64,hpc=16) | 105.0 |" in md and "| 2.35x |" in md, f"table:\n{md}")
        check(not [f for f in os.listdir(d) if f.startswith(".merge_bench.")], "a temporary file was left")

        r = subprocess.run([sys.executable, tool, p("fam1.json"), "--torch", p("no_torch.json"), "--json", p("m2.json")],
                           capture_output=True, text=True)
        m2 = json.load(open(p("m2.json"))) if os.path.exists(p("m2.json")) else {}
        check(r.returncode == 0 and all(x.get("ratio_vs_peer") is None for x in m2.get("mlaconf", {}).get("rows", [None])),
              f"without torch: exit {r.returncode}, {m2}")

        r = subprocess.run([sys.executable, tool, p("died.json"), "--torch", p("torch.json"), "--json", p("m3.json")],
                           capture_output=True, text=True)
        check(r.returncode == 1 and not os.path.exists(p("m3.json")), f"no mlaconf results: exit {r.returncode}")

    return c.finish()


if __name__ == "__main__":
    sys.exit(main())
