#!/usr/bin/env python3
"""bench/ncu_summary.py on made-up Nsight Compute CSV (exit 0 pass, 1 fail; no GPU needed).

The details page as ncu prints it: a warning line before the table, numbers with thousands separators, rows shorter
than the header (no rule columns), durations in ns for three launches (two of one kernel and grid, one of another)
and in usecond for a fourth, one metric missing from a launch. The raw page: the header, the units row, a row per
launch with three stall reasons and other metrics. Checked: a line per launch in the file's order with its figures
(ns and usecond to microseconds), the stall reasons largest first, --fold's count and medians, the markdown table,
the JSON; a file without a table exits 1; a Duration in an unknown unit is refused.
"""
import json
import os
import subprocess
import sys
import tempfile

from checks import Checks

HDR = ('"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size","Device",'
       '"CC","Section Name","Metric Name","Metric Unit","Metric Value","Rule Name","Rule Type","Rule Description"')


def details_row(lid, kernel, grid, section, metric, unit, value):
    return (f'"{lid}","859","kb","127.0.0.1","{kernel}","1","7","(128, 1, 1)","{grid}","0","9.0","{section}",'
            f'"{metric}","{unit}","{value}",')


def main():
    tool = sys.argv[1]
    c = Checks("ncu_summary")
    check = c.check
    k1 = "void unnamed>::gemv_mma_kernel<12, 1, 4, 0>(unnamed>::MmaArgs)"
    k2 = "void mlaconf::cuda::split_x_kernel(const float *, long, long, long, __half *, float *, __nv_bfloat16 *, bool)"
    launches = [  # id, kernel, grid, duration (unit, value), L2 %, eligible per scheduler (None: missing)
        ("0", k1, "(128, 512, 1)", ("ns", "1,282,208"), "78.72", "1.08"),
        ("1", k2, "(24, 8, 1)", ("ns", "3,104"), "12.5", "0.50"),
        ("2", k1, "(128, 512, 1)", ("ns", "674,624"), "71.08", None),
        ("3", k1, "(128, 512, 1)", ("usecond", "700.5"), "70.00", "1.02"),
    ]
    lines = ["==PROF== Connected to process 859", "==WARNING== Note: Running with unmodified GPU clocks.", HDR]
    for lid, k, grid, (unit, dur), l2, elig in launches:
        lines.append(details_row(lid, k, grid, "GPU Speed Of Light Throughput", "Duration", unit, dur))
        lines.append(details_row(lid, k, grid, "GPU Speed Of Light Throughput", "L2 Cache Throughput", "%", l2))
        if elig is not None:
            lines.append(details_row(lid, k, grid, "Scheduler Statistics", "Eligible Warps Per Scheduler", "warp", elig))
        lines.append(details_row(lid, k, grid, "Launch Statistics", "Registers Per Thread", "register/thread", "128"))
    stall = "smsp__average_warps_issue_stalled_{}_per_issue_active.ratio"
    raw = ['"ID","Kernel Name","' + stall.format("long_scoreboard") + '","' + stall.format("barrier") + '","' +
           stall.format("math_pipe_throttle") + '","smsp__cycles_active.avg"',
           '"","","ratio","ratio","ratio","cycle"']
    for lid, vals in (("0", ("2.10", "0.30", "0.90", "1,000")), ("1", ("0.10", "0.00", "0.05", "10")),
                      ("2", ("1.50", "0.70", "0.20", "900")), ("3", ("1.70", "0.50", "0.40", "950"))):
        raw.append(f'"{lid}","k",' + ",".join(f'"{v}"' for v in vals))

    with tempfile.TemporaryDirectory() as d:
        p = lambda n: os.path.join(d, n)
        with open(p("details.csv"), "w") as f:
            f.write("\n".join(lines) + "\n")
        with open(p("raw.csv"), "w") as f:
            f.write("\n".join(raw) + "\n")

        r = subprocess.run([sys.executable, tool, p("details.csv"), "--raw", p("raw.csv"), "--json", p("s.json")],
                           capture_output=True, text=True)
        check(r.returncode == 0, f"exit {r.returncode}: {r.stderr}")
        s = json.load(open(p("s.json"))) if os.path.exists(p("s.json")) else {"launches": []}
        got = s["launches"]
        check([x["ids"] for x in got] == [["0"], ["1"], ["2"], ["3"]], f"a line per launch in order: {[x['ids'] for x in got]}")
        if len(got) == 4:
            check(got[0]["kernel"] == "gemv_mma_kernel<12, 1, 4, 0>" and got[1]["kernel"] == "split_x_kernel",
                  f"names: {got[0]['kernel']!r}, {got[1]['kernel']!r}")
            check(abs(got[0]["us"] - 1282.208) < 1e-9 and abs(got[3]["us"] - 700.5) < 1e-9, f"durations: {got[0]['us']}, {got[3]['us']}")
            check(got[0]["L2 %"] == 78.72 and got[0]["regs"] == 128 and "eligible/sched" not in got[2], f"figures: {got[0]}, {got[2]}")
            check(list(got[2]["stalls"].items()) == [("long_scoreboard", 1.5), ("barrier", 0.7), ("math_pipe_throttle", 0.2)],
                  f"stalls largest first: {got[2]['stalls']}")
        check("| 0 | gemv_mma_kernel<12, 1, 4, 0> | (128, 512, 1) | (128, 1, 1) | 1282 |" in r.stdout
              and "long_scoreboard 2.10, math_pipe_throttle 0.90, barrier 0.30" in r.stdout, f"table:\n{r.stdout}")
        check(not [f for f in os.listdir(d) if f.startswith(".s.json.")], "a temporary file was left")

        r = subprocess.run([sys.executable, tool, p("details.csv"), "--raw", p("raw.csv"), "--fold", "--json", p("f.json")],
                           capture_output=True, text=True)
        f = json.load(open(p("f.json"))) if os.path.exists(p("f.json")) else {"launches": []}
        k = [x for x in f["launches"] if x["kernel"].startswith("gemv_mma")]
        check(r.returncode == 0 and len(f["launches"]) == 2 and len(k) == 1 and k[0]["launches"] == 3, f"fold: {f}")
        if k:
            check(abs(k[0]["us"] - 700.5) < 1e-9 and k[0]["eligible/sched"] == 1.05 and k[0]["stalls"]["long_scoreboard"] == 1.7,
                  f"fold's medians: {k[0]}")
            check("| 0..3 (3) | gemv_mma_kernel" in r.stdout, f"fold's ids:\n{r.stdout}")

        with open(p("empty.csv"), "w") as f2:
            f2.write("==PROF== No kernels were profiled.\n")
        r = subprocess.run([sys.executable, tool, p("empty.csv")], capture_output=True, text=True)
        check(r.returncode == 1 and "no kernel launch" in r.stderr, f"no table: exit {r.returncode}, {r.stderr!r}")

        with open(p("unit.csv"), "w") as f2:
            f2.write("\n".join([HDR, details_row("0", k1, "(1, 1, 1)", "s", "Duration", "fortnight", "2")]) + "\n")
        r = subprocess.run([sys.executable, tool, p("unit.csv")], capture_output=True, text=True)
        check(r.returncode != 0 and "fortnight" in r.stderr, f"an unknown unit: exit {r.returncode}, {r.stderr!r}")

    return c.finish()


if __name__ == "__main__":
    sys.exit(main())
