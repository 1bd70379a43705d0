#!/usr/bin/env python3
"""One line per profiled kernel launch from Nsight Compute's CSV (bench/gpu_ncu.sh writes both pages):

    python3 bench/ncu_summary.py DETAILS.csv [--raw RAW.csv] [--fold] [--json OUT.json]

DETAILS.csv: `ncu --csv --page details` (one row per launch, section and metric, durations in any unit: the sections SpeedOfLight,
MemoryWorkloadAnalysis, SchedulerStats, WarpStateStats, LaunchStats, Occupancy). RAW.csv: `ncu --csv --page raw` (one
row per launch, a column per metric, the units in the second row), from which the warp stall reasons
(smsp__average_warps_issue_stalled_<reason>_per_issue_active.ratio: warps waiting on each reason per issued
instruction) are taken, the largest first. Lines ncu prints before the table (==PROF==, ==WARNING==) are skipped.
Prints a markdown table, a line per launch in the file's order (--fold: the launches of one kernel, grid and block on
one line with their count and the median of each figure; one kernel may run different work at one grid, such as
experts by id and grouped), and writes the JSON atomically. Exit 1 if no launch was found.
"""
import argparse
import csv
import json
import re
import statistics
import sys

from atomic_write import write_atomic

# The details page's metrics shown, in order: (column, metric name in the section).
FIGURES = [
    ("us", "Duration"),
    ("dram %", "DRAM Throughput"),
    ("L2 %", "L2 Cache Throughput"),
    ("L1 %", "L1/TEX Cache Throughput"),
    ("SM %", "Compute (SM) Throughput"),
    ("issue %", "One or More Eligible"),
    ("active warps/sched", "Active Warps Per Scheduler"),
    ("eligible/sched", "Eligible Warps Per Scheduler"),
    ("cycles/issue", "Warp Cycles Per Issued Instruction"),
    ("L1 hit %", "L1/TEX Hit Rate"),
    ("L2 hit %", "L2 Hit Rate"),
    ("regs", "Registers Per Thread"),
    ("occupancy %", "Achieved Occupancy"),
]
STALL = re.compile(r"^smsp__average_warps_issue_stalled_(\w+?)_per_issue_active\.ratio$")


def number(text):
    """ncu's numbers carry thousands separators ("1,282,208"); None where the cell is not a number."""
    try:
        return float(text.replace(",", ""))
    except (AttributeError, ValueError):
        return None


def table_rows(path):
    """The CSV table of an ncu output file, from its header row (the first that starts with "ID")."""
    with open(path, newline="") as f:
        lines = f.read().splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith('"ID"')), None)
    return [] if start is None else list(csv.reader(lines[start:]))


def launches_from_details(path):
    """{launch id: {"kernel", "grid", "block", metric name: value}} in the order of the file."""
    rows = table_rows(path)
    if not rows:
        return {}
    col = {h: i for i, h in enumerate(rows[0])}
    need = ("ID", "Kernel Name", "Grid Size", "Block Size", "Metric Name", "Metric Value")
    if any(n not in col for n in need):
        raise SystemExit(f"ncu_summary: {path}: not the details page (columns {', '.join(need)} expected)")
    out = {}
    for r in rows[1:]:
        if len(r) <= col["Metric Value"]:
            continue
        launch = out.setdefault(r[col["ID"]], {"kernel": r[col["Kernel Name"]], "grid": r[col["Grid Size"]],
                                                "block": r[col["Block Size"]]})
        name, value = r[col["Metric Name"]], number(r[col["Metric Value"]])
        if name == "Duration" and value is not None and "Metric Unit" in col:  # to microseconds, whatever ncu chose
            scale = {"ns": 1e-3, "nsecond": 1e-3, "us": 1.0, "usecond": 1.0, "ms": 1e3, "msecond": 1e3, "s": 1e6, "second": 1e6}
            unit = r[col["Metric Unit"]]
            if unit not in scale:
                raise SystemExit(f"ncu_summary: {path}: a Duration in '{unit}'")
            value *= scale[unit]
        launch[name] = value
    return out


def stalls_from_raw(path):
    """{launch id: {reason: warps per issued instruction}} from the raw page (row 2: the units)."""
    rows = table_rows(path)
    if len(rows) < 3:
        return {}
    hdr = rows[0]
    reasons = [(i, m.group(1)) for i, h in enumerate(hdr) for m in [STALL.match(h)] if m]
    out = {}
    for r in rows[2:]:
        if len(r) == len(hdr):
            out[r[0]] = {name: v for i, name in reasons for v in [number(r[i])] if v is not None}
    return out


def short_name(kernel):
    """The kernel's name without its return type, namespaces and parameter list."""
    name = re.sub(r"^void\s+", "", kernel)
    name = re.sub(r"\((?:[^()]|\([^()]*\))*\)\s*$", "", name)  # the parameter list
    return re.sub(r"^(?:[\w:]+::|\([^)]*\)::|unnamed>::)+", "", name)


def summarize(details, raw=None, fold=False):
    launches = launches_from_details(details)
    stalls = stalls_from_raw(raw) if raw else {}
    groups = {}
    for lid, m in launches.items():
        groups.setdefault((short_name(m["kernel"]), m["grid"], m["block"]) + (() if fold else (lid,)), []).append((lid, m))
    result = []
    for (kernel, grid, block, *_), items in groups.items():
        line = {"kernel": kernel, "grid": grid, "block": block, "launches": len(items), "ids": [lid for lid, _ in items]}
        for label, metric in FIGURES:
            vals = [m[metric] for _, m in items if m.get(metric) is not None]
            if vals:
                line[label] = statistics.median(vals)
        reasons = {}
        for lid, _ in items:
            for name, v in stalls.get(lid, {}).items():
                reasons.setdefault(name, []).append(v)
        line["stalls"] = dict(sorted(((k, statistics.median(v)) for k, v in reasons.items()), key=lambda kv: -kv[1]))
        result.append(line)
    return result


def markdown(lines):
    labels = [label for label, _ in FIGURES if any(label in line for line in lines)]
    out = ["| ids | kernel | grid | block | " + " | ".join(labels) + " | top stalls (warps per issue) |",
           "|---|---|---|---|" + "---|" * len(labels) + "---|"]
    for line in lines:
        ids = line["ids"][0] if len(line["ids"]) == 1 else f"{line['ids'][0]}..{line['ids'][-1]} ({len(line['ids'])})"
        cells = [f"{line[label]:.4g}" if label in line else "-" for label in labels]
        top = ", ".join(f"{k} {v:.2f}" for k, v in list(line["stalls"].items())[:5]) or "-"
        out.append(f"| {ids} | {line['kernel']} | {line['grid']} | {line['block']} | " + " | ".join(cells) + f" | {top} |")
    return "\n".join(out)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("details")
    ap.add_argument("--raw")
    ap.add_argument("--fold", action="store_true")
    ap.add_argument("--json")
    a = ap.parse_args()
    lines = summarize(a.details, a.raw, a.fold)
    if not lines:
        print(f"ncu_summary: no kernel launch in {a.details}", file=sys.stderr)
        return 1
    print(markdown(lines))
    if a.json:
        write_atomic(a.json, json.dumps({"launches": lines}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
