#!/usr/bin/env python3
"""What carrying x in fewer 16-bit terms would cost the tensor-core GEMV's accuracy (a design question of
docs/perf/h200-2026-12-02.md v14's Next; no GPU needed).

Up to v14 optimized/gemv_mma.cu carried each x as three 16-bit terms (hi + mid + lo), so an mma's 8 columns held
2 x; from 16 x on that mma work, not the weights' bytes, bounded the GEMV (torch's fp16 F.linear was 2-5x faster
there). v15 takes two fp16 terms of x scaled per 256-value block by a power of two, 4 x in an mma's columns, on
the figures this script prints: for each kind of x, the error that the representation
alone adds to y = W x (exact float64 arithmetic otherwise), as gemv_mma's judge measures it: max over rows of
|y_terms - y| / sum |w x|, against the judge's bound (suites/gpu/test_gemv_mma.cpp: kMmaBound 7e-7, about 10x
the fp32 accumulation's error that the kernel shows, 6.9e-8 to 1.4e-7; v15 on the H200: at most 1.27e-7).

    python3 bench/x_terms_error.py [--rows 256] [--cols 6144] [--trials 10] [--seed 1]     # exit 0; 2: bad options

Needs numpy. The weights are Q4_K-like (integer codes times a per-32 scale); the kinds of x: Gaussian, Gaussian
with 0.2 % of values 100x larger (activation outliers), Student t with 3 degrees of freedom.
"""
import argparse
import sys

import numpy as np

BOUND = 7e-7  # kMmaBound of suites/gpu/test_gemv_mma.cpp


def as_terms(x, n):
    """x (float64 holding fp32 values) as n fp16 terms of x 2^e per 256-value block, e = 15 - E for the block's
    largest |x| in [2^(E-1), 2^E) (at most 100), each term the rounding of what the previous ones left."""
    xb = x.reshape(-1, 256)
    e = np.minimum(15 - np.frexp(np.abs(xb).max(axis=1, keepdims=True))[1], 100)
    rest = xb * np.exp2(e)
    total = np.zeros_like(rest)
    for _ in range(n):
        t = rest.astype(np.float16).astype(np.float64)
        total += t
        rest -= t
    return (total * np.exp2(-e)).reshape(-1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=256)
    ap.add_argument("--cols", type=int, default=6144)
    ap.add_argument("--trials", type=int, default=10)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    if a.cols % 256 or a.cols <= 0 or a.rows <= 0 or a.trials <= 0:
        print("x_terms_error: --cols must be a positive multiple of 256, --rows and --trials positive", file=sys.stderr)
        return 2
    rng = np.random.default_rng(a.seed)
    K = a.cols
    kinds = {
        "gaussian": lambda: rng.standard_normal(K),
        "outliers_100x": lambda: rng.standard_normal(K) * np.where(rng.random(K) < 0.002, 100.0, 1.0),
        "student_t3": lambda: rng.standard_t(3, K),
    }
    print(f"error of y = W x from x's representation alone, / sum |w x| (max over {a.rows} rows x {a.trials} trials); bound {BOUND:.0e}")
    for name, draw in kinds.items():
        worst = {2: 0.0, 3: 0.0}
        for _ in range(a.trials):
            x = draw().astype(np.float32).astype(np.float64)
            W = rng.integers(-8, 8, size=(a.rows, K)).astype(np.float64) * rng.random((a.rows, K // 32)).repeat(32, axis=1)
            want, scale = W @ x, np.abs(W) @ np.abs(x)
            for n in worst:
                worst[n] = max(worst[n], float((np.abs(W @ as_terms(x, n) - want) / scale).max()))
        print(f"  {name:14s} 2 fp16 terms {worst[2]:.2e}   3 fp16 terms {worst[3]:.2e}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
