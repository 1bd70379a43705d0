#!/usr/bin/env python3
"""bench/trace_summary.py on a made-up trace whose figures are known (exit 0 pass, 1 fail).

Three decode steps of 1000 us each, ended by a 4-byte device-to-host copy (decode_step_greedy's ids;
an earlier prefill downloads a larger block first, which must not be taken for a step). Per step: the
device runs kernel A 100-400 us and kernel B 500-700 us (busy 500 us, idle 500 us: 100 us after the step
starts, 100 us before B, 300 us before the step's copy); the host launches are 10 us runtime calls, and
a 50 us cudaMemcpy overlaps the last gap. A mutation check: the same trace with B moved to overlap A must
report less busy time, so the union of intervals is computed, not a sum. Streams: with a kernel C on stream 9
at 350-450 us (a side stream), stream 7 is busy 500 us over a 600-us span, stream 9 100 us, and the two overlap
for 50 us (A's last 50); --timeline lists the last step's activities in order, its ending copy too.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile


def write_trace(path, overlap=False, side=False):
    rows = ["kind,name,start_ns,end_ns,stream,correlation,extra"]
    us = 1000
    # a prefill before the steps: its logits download is larger than the steps' ids
    rows.append(f"memcpy,memcpy_kind2,{0},{50 * us},7,1,619520")
    t0 = 1000 * us
    for s in range(4):  # the first end starts the first step
        base = t0 + s * 1000 * us
        if s > 0:
            b0 = base - 1000 * us
            rows.append(f'kernel,"A(int, float)",{b0 + 100 * us},{b0 + 400 * us},7,10,1x1x1')
            # a mangled name (as CUPTI reports them), 1 us, inside A's interval
            rows.append(f"kernel,_ZN7mlaconf4cuda12embed_kernelEiPKhlPKilliiPf,{b0 + 150 * us},{b0 + 151 * us},7,13,1x1x1")
            bs, be = (b0 + 300 * us, b0 + 500 * us) if overlap else (b0 + 500 * us, b0 + 700 * us)
            rows.append(f'kernel,"B<1, 2>(int)",{bs},{be},7,11,2x1x1')
            if side:
                rows.append(f'kernel,"C(int)",{b0 + 350 * us},{b0 + 450 * us},9,14,3x1x1')
            rows.append(f"api,cudaLaunchKernel_v7000,{b0 + 90 * us},{b0 + 100 * us},0,10,1")
            rows.append(f"api,cudaLaunchKernel_v7000,{b0 + 480 * us},{b0 + 490 * us},0,11,1")
            rows.append(f"api,cudaMemcpy_v3020,{b0 + 940 * us},{b0 + 990 * us},0,12,1")
        rows.append(f"memcpy,memcpy_kind2,{base - 10 * us},{base},7,12,4")
    with open(path, "w") as f:
        f.write("\n".join(rows) + "\n")


def run(script, csv_path, out_json, extra=()):
    r = subprocess.run([sys.executable, script, csv_path, "--steps", "3", "--json", out_json, *extra], check=True,
                       stdout=subprocess.PIPE, text=True)
    with open(out_json) as f:
        j = json.load(f)
    j["_stdout"] = r.stdout
    return j


def main():
    script = sys.argv[1]
    bad = []
    with tempfile.TemporaryDirectory() as d:
        p = os.path.join(d, "t.csv")
        write_trace(p)
        j = run(script, p, os.path.join(d, "t.json"))

        def near(key, want):
            if abs(j[key] - want) > 1e-6:
                bad.append(f"{key} = {j[key]}, want {want}")
        near("steps_averaged", 3)
        near("step_bytes", 4)
        near("wall_us", 1000)
        near("kernel_busy_us", 500)
        near("device_busy_us", 510)  # + the 10 us copy that ends the step
        near("idle_us", 490)
        near("kernels", 3)
        if abs(j["idle_before"]["B<1, 2>"]["us"] - 100) > 1e-6:
            bad.append(f"idle before B: {j['idle_before']}")
        if abs(j["host_during_idle_us"].get("cudaMemcpy_v3020", 0) - 50) > 1e-6:
            bad.append(f"host during idle: {j['host_during_idle_us']}")
        if abs(j["kernels_by_name"]["A"]["us"] - 300) > 1e-6:
            bad.append(f"kernels by name: {j['kernels_by_name']}")
        # names readable where binutils' c++filt is installed (as on the GPU host and in CI)
        want = "embed_kernel" if shutil.which("c++filt") else "_ZN7mlaconf4cuda12embed_kernelEiPKhlPKilliiPf"
        if want not in j["kernels_by_name"]:
            bad.append(f"kernel names: {list(j['kernels_by_name'])}, want {want}")
        # mutation: B overlapping A shrinks the union (a sum of durations would not notice)
        write_trace(p, overlap=True)
        m = run(script, p, os.path.join(d, "m.json"))
        if abs(m["kernel_busy_us"] - 400) > 1e-6:
            bad.append(f"overlapping kernels: busy {m['kernel_busy_us']}, want 400 (the union)")
        # streams: C on a side stream overlapping A's last 50 us
        write_trace(p, side=True)
        s = run(script, p, os.path.join(d, "s.json"), ["--timeline"])
        st = s["streams"]
        for sid, busy, span, kernels in (("7", 500, 600, 3), ("9", 100, 100, 1)):
            got = st.get(sid, {})
            if abs(got.get("busy_us", -1) - busy) > 1e-6 or abs(got.get("span_us", -1) - span) > 1e-6 or \
                    abs(got.get("kernels", -1) - kernels) > 1e-6:
                bad.append(f"stream {sid}: {got}, want busy {busy}, span {span}, {kernels} kernels")
        if abs(s["overlap_us"] - 50) > 1e-6 or abs(s["kernel_busy_us"] - 550) > 1e-6:
            bad.append(f"overlap {s['overlap_us']} (want 50), kernel busy {s['kernel_busy_us']} (want 550)")
        # the timeline's kernel lines (offset, duration, stream, name...), in start order
        order = [l.split()[3] for l in s["_stdout"].splitlines() if len(l.split()) > 3 and l.split()[2] in ("s7", "s9")]
        if order != ["A", want, "C", "B<1,", "memcpy_kind2"]:
            bad.append(f"timeline {order}, want A, {want}, C, B<1, 2>, the step's copy (by start)")
    for b in bad:
        print("FAIL:", b)
    print("trace_summary: " + ("ok" if not bad else f"{len(bad)} checks failed"))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
