#!/usr/bin/env python3
"""The error of a correct fp8 lightning indexer at GLM-5's dims, for the fp8 precision class.

    bench/fp8_indexer_error.py [--tokens N] [--seed S]

DeepSeek-style fp8 indexer: q [T,Hi,Di] and k [S,Di] rotated by an orthonormal Hadamard matrix (which
leaves q.k unchanged), then quantized to e4m3 with one float32 scale per 128 values (one per head row of
q, one per key row of k), the scores computed in float32 from the dequantized values:
    I[t,s] = sum_h w[t,h] * Hi^-1/2 * Di^-1/2 * relu(q[t,h] . k[s])  for s <= t
Compared with the float64 scores on the same inputs, with the judge's metrics (docs/TOLERANCES.md): nmse,
max_rel, 1 - cosine over the finite (causal) positions, the worst row's NMSE (row_verdict.h, energy
floor at the typical row), and the largest absolute score error, which sets how close two scores must be
for their order to be a rounding question (tie_gap). Also how many top-k rows differ from the float64
top-k, and how many of those differ outside the measured tie gap (must be none).
Inputs: N(0,1) q and k, weights N(0,1), GLM-5 dims (Hi 32, Di 128, top_k 2048).
"""
import argparse

import numpy as np

HI, DI, K = 32, 128, 2048


def hadamard(n):
    h = np.array([[1.0]])
    while h.shape[0] < n:
        h = np.block([[h, h], [h, -h]])
    return h / np.sqrt(n)


def e4m3(x):
    ax = np.abs(x)
    e = np.maximum(np.floor(np.log2(np.maximum(ax, 2.0 ** -12))), -6)
    step = 2.0 ** (e - 3)
    return np.sign(x) * np.minimum(np.round(ax / step) * step, 448.0)


def quant_rows(x):
    """e4m3 with one float32 scale per last-axis row (128 values), dequantized."""
    s = np.abs(x).max(axis=-1, keepdims=True) / 448.0
    s[s == 0] = 1
    return e4m3(x / s) * s.astype(np.float32)


def scores(q, k, w, dtype):
    T = q.shape[0]
    dots = np.einsum("thd,sd->ths", q.astype(dtype), k.astype(dtype))
    s = np.einsum("th,ths->ts", (w * HI ** -0.5 * DI ** -0.5).astype(dtype), np.maximum(dots, 0))
    s[np.triu_indices(T, 1)] = -np.inf
    return s.astype(np.float64)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tokens", type=int, default=K + 32)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    T = a.tokens
    rng = np.random.default_rng(a.seed)
    q = rng.standard_normal((T, HI, DI)).astype(np.float32)
    k = rng.standard_normal((T, DI)).astype(np.float32)
    w = rng.standard_normal((T, HI)).astype(np.float32)
    e = scores(q.astype(np.float64), k.astype(np.float64), w.astype(np.float64), np.float64)
    hd = hadamard(DI)
    q8 = quant_rows((q.astype(np.float64) @ hd)) @ hd.T  # rotate, quantize, and (for the check) rotate back:
    k8 = quant_rows((k.astype(np.float64) @ hd)) @ hd.T  # q.k is the same in either basis
    x = scores(q8, k8, w, np.float32)
    m = np.isfinite(e)
    d = np.where(m, x - e, 0)
    ee = np.where(m, e, 0)
    nmse = (d ** 2).sum() / (ee ** 2).sum()
    max_rel = np.abs(d).max() / np.abs(ee).max()
    cos = (np.where(m, x, 0) * ee).sum() / np.sqrt((np.where(m, x, 0) ** 2).sum() * (ee ** 2).sum())
    se, sd, n = (ee ** 2).sum(1), (d ** 2).sum(1), m.sum(1)
    row = sd / np.maximum(se, n * se.sum() / n.sum())
    print(f"tokens {T}: nmse {nmse:.3g}  max_rel {max_rel:.3g}  1-cos {1 - cos:.3g}  worst row nmse {row.max():.3g} (row {row.argmax()})  "
          f"max |score error| {np.abs(d).max():.3g} (scores' rms {np.sqrt((ee ** 2).sum() / n.sum()):.3g})")
    # Top-k agreement, and the gaps of the rows that differ.
    differ, beyond, beyond_class = 0, 0, 0
    tie = 2 * np.abs(d).max()
    for t in range(K, T):
        oe = np.argsort(-e[t, :t + 1], kind="stable")
        ox = np.argsort(-x[t, :t + 1], kind="stable")
        if set(oe[:K]) != set(ox[:K]):
            differ += 1
            gap = e[t, oe[K - 1]] - e[t, oe[K]]
            beyond += gap > tie
            beyond_class += gap > 0.3  # the fp8 class's tie_gap (fixtures/tolerances.cpp)
    print(f"top-k rows past top_k: {T - K}, differ {differ}, differ with an expected gap above 2x the max score error ({tie:.3g}): {beyond}; above the fp8 class's tie_gap 0.3: {beyond_class}")


if __name__ == "__main__":
    main()
