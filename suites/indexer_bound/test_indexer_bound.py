#!/usr/bin/env python3
"""The decode selection's error bound (optimized/indexer_select.cu, indexer_bounds_mma) against a model of what it
bounds, on the CPU (exit 0 pass, 1 fail, 77 without numpy).

The bound e must cover |a - s| for every key: s is the fp32 indexer's score, computed here with the fp32
kernel's own operations (each head's dot product one fmaf chain over the dims, relu, per lane group
g = 0..3 an fmaf chain over heads g, g + 4, ..., then (p0 + p2) + (p1 + p3)); a is the tensor-core score:
q and k rounded to fp16 (round to nearest), products exact, each head's sum exact and then moved by the
accumulation error the bound allows for (2^-15 of the sum of |products|) in the direction that hurts, the
weighted relu sum in fp32. The constants are read from indexer_select.cu, so the test follows them.

Data: uniform; keys almost orthogonal to q (cancellation); values in fp16's subnormal range; values near
fp16's largest; and the worst cases of the relative and the absolute term: q and k parallel, every element
rounded down by almost half an fp16 step (normal, then subnormal values). Checked: |a - s| <= e everywhere;
on both worst cases the bound is tight (the error reaches more than 80 % of e: with either term at half its
size this test fails).
"""
import os
import re
import sys

try:
    import numpy as np
except ImportError:
    print("indexer_bound: numpy missing: skipped")
    sys.exit(77)

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "bench_tools"))
from checks import Checks  # noqa: E402  (suites/bench_tools' bookkeeping)

Di = 128


def constants(src):
    """kBoundRel and kBoundAbs as indexer_select.cu defines them (C float expressions of two literals)."""
    out = {}
    for name in ("kBoundRel", "kBoundAbs"):
        m = re.search(r"constexpr float " + name + r" = ([0-9.]+)f / ([0-9.]+)f;", src)
        if not m:
            raise SystemExit(f"indexer_bound: {name} not found in indexer_select.cu")
        out[name] = np.float32(np.float32(float(m.group(1))) / np.float32(float(m.group(2))))
    if "br.wa * 0x1p-40f" not in src:
        raise SystemExit("indexer_bound: the bound's 2^-40 term not found in indexer_select.cu")
    return out["kBoundRel"], out["kBoundAbs"]


def fmaf(a, b, c):
    """fp32 fused multiply-add: the product is exact in float64, the sum rounded once there, then to fp32
    (the double rounding differs from a true fmaf only on exact ties of the second rounding)."""
    return (a.astype(np.float64) * b.astype(np.float64) + c.astype(np.float64)).astype(np.float32)


def exact_scores(q, k, w):
    """The fp32 kernel's scores: q [H, Di], k [N, Di], w [H] (float32) -> [N]."""
    H = q.shape[0]
    dot = np.zeros((k.shape[0], H), np.float32)
    for d in range(Di):
        dot = fmaf(k[:, d:d + 1], q[None, :, d], dot)
    relu = np.maximum(dot, np.float32(0))
    p = []
    for g in range(4):
        acc = np.zeros(k.shape[0], np.float32)
        for h in range(g, H, 4):
            acc = fmaf(np.full(k.shape[0], w[h], np.float32), relu[:, h], acc)
        p.append(acc)
    return (p[0] + p[2]) + (p[1] + p[3])


def approx_scores(q, k, w, exact):
    """The tensor-core score, its accumulation error pushed away from the exact score."""
    qh, kh = q.astype(np.float16).astype(np.float64), k.astype(np.float16).astype(np.float64)
    dot = kh @ qh.T  # [N, H]: products exact (11 x 11 bits), sums in float64
    slack = 2.0 ** -15 * (np.abs(kh) @ np.abs(qh).T)
    w64 = w.astype(np.float64)
    lo = (np.maximum(dot - slack, 0) * w64).sum(1)
    hi = (np.maximum(dot + slack, 0) * w64).sum(1)
    worst = np.where(np.abs(lo - exact) > np.abs(hi - exact), lo, hi)
    return worst.astype(np.float32)


def bound(q, k, w, rel, absolute):
    """e per key, as indexer_bounds_mma computes it (in float32)."""
    aw = np.abs(w)
    qn = np.float32((aw * np.sqrt((q.astype(np.float32) ** 2).sum(1))).sum())
    qa = np.float32((aw * np.abs(q).sum(1)).sum())
    wa = np.float32(aw.sum())
    k2 = np.sqrt((k.astype(np.float32) ** 2).sum(1))
    k1 = np.abs(k).sum(1)
    return rel * k2 * qn + absolute * (k1 * wa + qa) + wa * np.float32(2.0 ** -40)


def main():
    c = Checks("indexer_bound")
    rel, absolute = constants(open(sys.argv[1]).read())
    rng = np.random.default_rng(7)
    H, N = 32, 512
    cases = {}
    q = rng.uniform(-1, 1, (H, Di)).astype(np.float32)
    w = rng.uniform(-0.2, 0.2, H).astype(np.float32)
    cases["uniform"] = (q, rng.uniform(-1, 1, (N, Di)).astype(np.float32), w)
    k = rng.uniform(-1, 1, (N, Di)).astype(np.float32)  # each key made orthogonal to q_0, then nudged
    k -= np.outer(k @ q[0] / (q[0] @ q[0]), q[0]).astype(np.float32)
    k += rng.uniform(-1e-3, 1e-3, k.shape).astype(np.float32)
    cases["cancellation"] = (q, k, w)
    cases["subnormal"] = (q * np.float32(3e-6), rng.uniform(-3e-6, 3e-6, (N, Di)).astype(np.float32), w)
    cases["near_max"] = (q * np.float32(200.0), rng.uniform(-300, 300, (N, Di)).astype(np.float32), w)
    # Worst case of the relative term: q_h and k parallel, all positive, every element just under an fp16
    # rounding midpoint (rounded down by almost half a step, all the same way).
    down = np.float32(1.0) + np.float32(2.0 ** -11) * np.float32(0.999)
    qw = np.full((H, Di), down, np.float32)
    kw = np.full((N, Di), down, np.float32) * rng.integers(1, 3, (N, 1)).astype(np.float32)
    ww = np.full(H, 1.0 / H, np.float32)
    cases["worst"] = (qw, kw, ww)
    # Worst case of the absolute term: the same in fp16's subnormal range (step 2^-24), each element rounded
    # down by almost half a step, 2^-25.
    sub = np.float32(50.499 * 2.0 ** -24)
    cases["worst_subnormal"] = (np.full((H, Di), sub, np.float32), np.full((N, Di), sub, np.float32), ww)

    for name, (q, k, w) in cases.items():
        s = exact_scores(q, k, w)
        a = approx_scores(q, k, w, s.astype(np.float64))
        e = bound(q, k, w, rel, absolute)
        err = np.abs(a.astype(np.float64) - s.astype(np.float64))
        ratio = float((err / e).max())
        print(f"{name}: max |a - s| / e = {ratio:.4f}")
        c.check(np.all(np.isfinite(s)) and np.all(np.isfinite(e)), f"{name}: non-finite scores or bounds")
        c.check(np.all(err <= e), f"{name}: |a - s| exceeds the bound (max ratio {ratio:.4f})")
        if name.startswith("worst"):
            c.check(ratio > 0.8, f"{name}: the error reaches only {ratio:.4f} of the bound (a bound half as large "
                                 f"would pass: the test could not fail)")
    return c.finish()


if __name__ == "__main__":
    sys.exit(main())
