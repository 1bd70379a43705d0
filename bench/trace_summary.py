#!/usr/bin/env python3
"""Where a decode step's time goes, from a bench/cupti_trace.cpp CSV (device activity + runtime calls).

A step is the interval between the ends of two consecutive downloads that end a step (device-to-host
copies of the step's size, --step-bytes; default: the size of the trace's last device-to-host copy, which
ends the last decode step: the logits of decode_step, or the B greedy ids of decode_step_greedy that
`mlaconf bench` uses). Per
step: wall time, the time the device runs anything (union of kernel, memset and memcpy intervals), the
idle rest, counts, and the idle gaps attributed to what the host was doing meanwhile (the runtime calls
overlapping each gap). The last --steps steps are averaged (the earlier ones include warm-up and graph
capture). Per stream (a decode step forks the indexer onto a side stream): its kernels' busy time (the union
of their intervals) and the span from its first start to its last end; overlap_us is the time the streams
ran kernels at once (the sum of the streams' busy minus the kernels' union). --timeline prints the last
step's device activities in order: offset from the step's start, duration, stream, name, grid.

  python3 bench/trace_summary.py trace.csv [--steps N] [--step-bytes BYTES] [--json out.json] [--timeline]
"""
import argparse
import collections
import csv
import json
import shutil
import subprocess
import sys

from atomic_write import write_atomic


def load(path):
    rows = []
    with open(path, newline="") as f:
        for r in csv.DictReader(f):
            r["start"] = int(r["start_ns"])
            r["end"] = int(r["end_ns"])
            rows.append(r)
    return rows


def union_ns(intervals):
    total, cur_s, cur_e = 0, None, None
    for s, e in sorted(intervals):
        if cur_e is None or s > cur_e:
            if cur_e is not None:
                total += cur_e - cur_s
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
    if cur_e is not None:
        total += cur_e - cur_s
    return total


def demangled(names):
    """Mangled C++ names -> readable ones by binutils' c++filt (the names unchanged where it is absent)."""
    names = sorted(set(names))
    if not names or not shutil.which("c++filt"):
        return {n: n for n in names}
    r = subprocess.run(["c++filt"], input="\n".join(names) + "\n", capture_output=True, text=True)
    out = r.stdout.split("\n")
    return {n: (out[i] if r.returncode == 0 and i < len(out) and out[i] else n) for i, n in enumerate(names)}


READABLE = {}


def short(name):
    """A kernel's name without return type, namespaces and parameters: gemv_blocks_kernel<14, 1, 0>."""
    name = READABLE.get(name, name).replace("(anonymous namespace)::", "")
    if name.startswith("void "):
        name = name[5:]
    name = name.split("(")[0].replace("mlaconf::cuda::", "")
    return name if len(name) < 70 else name[:67] + "..."


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("csv")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--step-bytes", type=int, default=0)
    ap.add_argument("--json")
    ap.add_argument("--timeline", action="store_true")
    a = ap.parse_args()
    rows = load(a.csv)
    READABLE.update(demangled(r["name"] for r in rows if r["kind"] == "kernel"))
    dev = [r for r in rows if r["kind"] in ("kernel", "memset", "memcpy")]
    api = [r for r in rows if r["kind"] == "api"]
    d2h = [r for r in dev if r["kind"] == "memcpy" and r["name"] == "memcpy_kind2"]
    size = a.step_bytes
    if not size:
        if not d2h:
            sys.exit("trace_summary: no device-to-host copy: no steps found")
        size = int(max(d2h, key=lambda r: r["end"])["extra"])
    ends = sorted(r["end"] for r in d2h if int(r["extra"]) == size)
    if len(ends) < 2:
        sys.exit("trace_summary: fewer than two steps")
    windows = list(zip(ends[:-1], ends[1:]))[-a.steps:]
    agg = collections.defaultdict(float)
    kern = collections.defaultdict(lambda: [0, 0.0])
    calls = collections.defaultdict(lambda: [0, 0.0])
    gap_host = collections.defaultdict(float)
    gap_next = collections.defaultdict(lambda: [0, 0.0])
    per_stream = collections.defaultdict(lambda: [0, 0.0, 0.0])  # kernels, busy us, span us (summed over steps)
    for w0, w1 in windows:
        inside = sorted((r for r in dev if r["start"] >= w0 and r["end"] <= w1), key=lambda r: r["start"])
        busy = union_ns([(r["start"], r["end"]) for r in inside])
        agg["wall_us"] += (w1 - w0) / 1e3
        agg["device_busy_us"] += busy / 1e3
        agg["kernel_busy_us"] += union_ns([(r["start"], r["end"]) for r in inside if r["kind"] == "kernel"]) / 1e3
        for kind in ("kernel", "memset", "memcpy"):
            agg[kind + "s"] += sum(1 for r in inside if r["kind"] == kind)
        agg["memset_us"] += sum(r["end"] - r["start"] for r in inside if r["kind"] == "memset") / 1e3
        for r in inside:
            if r["kind"] == "kernel":
                k = kern[short(r["name"])]
                k[0] += 1
                k[1] += (r["end"] - r["start"]) / 1e3
        for st in sorted({r["stream"] for r in inside if r["kind"] == "kernel"}):
            ks = [(r["start"], r["end"]) for r in inside if r["kind"] == "kernel" and r["stream"] == st]
            ps = per_stream[st]
            ps[0] += len(ks)
            ps[1] += union_ns(ks) / 1e3
            ps[2] += (max(e for _, e in ks) - min(b for b, _ in ks)) / 1e3
        for r in api:
            if r["start"] >= w0 and r["end"] <= w1:
                c = calls[r["name"]]
                c[0] += 1
                c[1] += (r["end"] - r["start"]) / 1e3
        # idle gaps between device activities, and the runtime calls the host made meanwhile
        prev_end = w0
        for r in inside:
            if r["start"] > prev_end:
                g0, g1 = prev_end, r["start"]
                gn = gap_next[short(r["name"]) if r["kind"] == "kernel" else r["kind"]]
                gn[0] += 1
                gn[1] += (g1 - g0) / 1e3
                for c in api:
                    o = min(c["end"], g1) - max(c["start"], g0)
                    if o > 0:
                        gap_host[c["name"]] += o / 1e3
            prev_end = max(prev_end, r["end"])
    n = len(windows)
    out = {k: v / n for k, v in agg.items()}
    out["idle_us"] = out["wall_us"] - out["device_busy_us"]
    out["steps_averaged"] = n
    out["step_bytes"] = size
    out["kernels_by_name"] = {k: {"calls": v[0] / n, "us": v[1] / n} for k, v in sorted(kern.items(), key=lambda x: -x[1][1])}
    out["runtime_calls"] = {k: {"calls": v[0] / n, "us": v[1] / n} for k, v in sorted(calls.items(), key=lambda x: -x[1][1])}
    out["idle_before"] = {k: {"gaps": v[0] / n, "us": v[1] / n} for k, v in sorted(gap_next.items(), key=lambda x: -x[1][1])}
    out["host_during_idle_us"] = {k: v / n for k, v in sorted(gap_host.items(), key=lambda x: -x[1])}
    out["streams"] = {st: {"kernels": v[0] / n, "busy_us": v[1] / n, "span_us": v[2] / n}
                      for st, v in sorted(per_stream.items(), key=lambda x: -x[1][1])}
    out["overlap_us"] = sum(v["busy_us"] for v in out["streams"].values()) - out["kernel_busy_us"]
    if a.json:
        write_atomic(a.json, json.dumps(out, indent=1))
    print(f"steps averaged: {n} (a download of {size} bytes ends each step)")
    print(f"wall {out['wall_us']:.1f} us | device busy {out['device_busy_us']:.1f} (kernels {out['kernel_busy_us']:.1f}) "
          f"| idle {out['idle_us']:.1f} us")
    print(f"per step: {out.get('kernels', 0):.0f} kernels, {out.get('memsets', 0):.0f} memsets ({out.get('memset_us', 0):.1f} us), "
          f"{out.get('memcpys', 0):.0f} memcpys")
    def show(title, items, count, n):
        print(title)
        for k, v in list(items.items())[:n]:
            print(f"  {v['us']:9.1f} us {v[count]:5.1f}x  {k}")
    show("kernels by time (calls, us):", out["kernels_by_name"], "calls", 25)
    show("runtime calls by host time (calls, us):", out["runtime_calls"], "calls", 15)
    show("idle device time, by what ran next (gaps, us):", out["idle_before"], "gaps", 15)
    print("host runtime calls overlapping the idle time (us):")
    for k, v in list(out["host_during_idle_us"].items())[:10]:
        print(f"  {v:9.1f} us  {k}")
    print(f"streams (kernels, busy, span; {out['overlap_us']:.1f} us with kernels on two or more at once):")
    for st, v in out["streams"].items():
        print(f"  stream {st:>4}: {v['kernels']:5.1f} kernels, busy {v['busy_us']:8.1f} us, span {v['span_us']:8.1f} us")
    if a.timeline:
        w0, w1 = windows[-1]
        print("the last step (offset from its start, duration, stream, what, grid or bytes), us:")
        for r in sorted((r for r in dev if r["start"] >= w0 and r["end"] <= w1), key=lambda r: r["start"]):
            what = short(r["name"]) if r["kind"] == "kernel" else r["name"] if r["kind"] == "memcpy" else r["kind"]
            print(f"  {(r['start'] - w0) / 1e3:9.1f} {(r['end'] - r['start']) / 1e3:8.1f}  s{r['stream']:<4} {what:<44} {r['extra']}")

if __name__ == "__main__":
    main()
