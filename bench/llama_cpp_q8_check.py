#!/usr/bin/env python3
"""Is llama.cpp's matmul error its activation quantization? (docs/LLAMA_CPP.md, "The mapping is right")

    bench/llama_cpp_q8_check.py FIXTURE.h5 LLAMA_ANSWER.h5 MODEL.gguf [--case NAME]

Recomputes four layer-0 outputs of llama.cpp's answer from llama.cpp's own layer-0 inputs: W (the GGUF
tensor dequantized by gguf-py) times x, and W times x quantized the way ggml's CPU backend quantizes a
matmul's activations for that weight type (q8_K blocks of 256 for K-quants, q8_0 blocks of 32 with an
f16 scale for Q8_0, f16 for F16 weights). llama.cpp's output equals W Q(x) to rounding when the error
against the f64 reference is that quantization. Needs numpy, h5py and gguf (the Debian python3 here).
"""
import argparse

import h5py
import numpy as np
import gguf
from gguf import quants


def q8_k(x):
    x = x.astype(np.float32).reshape(-1, 256)
    out = np.zeros_like(x)
    for b, v in enumerate(x):
        m = v[np.argmax(np.abs(v))]
        if m == 0:
            continue
        iscale = np.float32(-127.0) / m
        out[b] = np.minimum(127, np.rint(iscale * v)) * (np.float32(1) / iscale)
    return out.reshape(-1)


def q8_0(x):
    x = x.astype(np.float32).reshape(-1, 32)
    out = np.zeros_like(x)
    for b, v in enumerate(x):
        a = np.max(np.abs(v))
        if a == 0:
            continue
        out[b] = np.rint(v * (np.float32(127) / a)) * np.float32(np.float16(a / np.float32(127)))
    return out.reshape(-1)


def f16(x):
    return x.astype(np.float16).astype(np.float64)


def nmse(a, b):
    return float(np.sum((a - b) ** 2) / np.sum(b ** 2))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("fixture")
    ap.add_argument("answer")
    ap.add_argument("model")
    ap.add_argument("--case", default=None, help="forward case (default: the first case of the answer)")
    a = ap.parse_args()
    tensors = {t.name: t for t in gguf.GGUFReader(a.model).tensors}
    ans = h5py.File(a.answer, "r")
    case = a.case or next(iter(ans.keys()))
    A, E = ans[case]["layers/0"], h5py.File(a.fixture, "r")[case]["layers/0"]
    act = {"Q8_0": (q8_0, "q8_0"), "F16": (f16, "f16"), "BF16": (None, "bf16"), "F32": (None, "f32")}
    print(f"{'layer 0':16s} {'weight':6s} {'x as':5s} {'nmse(llama, W x)':>17s} {'nmse(llama, W Q(x))':>20s}")
    for out, inp, w in [("q_a", "attn_norm_out", "blk.0.attn_q_a.weight"), ("q_b", "q_a_norm", "blk.0.attn_q_b.weight"),
                        ("kv_a", "attn_norm_out", "blk.0.attn_kv_a_mqa.weight"),
                        ("indexer_weights", "attn_norm_out", "blk.0.indexer.proj.weight")]:
        t = tensors[w]
        tname = t.tensor_type.name
        q, qn = act.get(tname, (q8_k, "q8_K"))
        if q is None:
            continue
        W = quants.dequantize(t.data, t.tensor_type).astype(np.float64).reshape(-1, int(t.shape[0]))
        x = A[inp][()].astype(np.float64)
        y = A[out][()].reshape(x.shape[0], -1).astype(np.float64)
        xq = np.stack([q(r) for r in x])
        print(f"{out:16s} {tname:6s} {qn:5s} {nmse(y, x @ W.T):17.3g} {nmse(y, xq @ W.T):20.3g}")


if __name__ == "__main__":
    main()
