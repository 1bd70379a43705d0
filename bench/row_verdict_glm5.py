#!/usr/bin/env python3
"""Row-wise verdicts at real GLM-5 attention sizes: does `mlaconf compare` fail the bugs that live in the
rows past top_k, and pass correct answers, at top_k + 32 tokens?

    bench/row_verdict_glm5.py MLACONF [--tokens N] [--out DIR] [--seed S] [--variants a,b] [--precision-of NAME=P,...]
                              [--heads H --latent L --rope R --top-k K]   (other dims: smaller models; tokens
                                                                           default top_k + 32)

Writes an op-level fixture of one layer's sparse MLA at GLM-5's dims (64 heads, latent 512 + rope 64,
top_k 2048, softmax scale 256^-1/2): q_absorbed and the latent cache drawn at random (float32), the
indexer's top-k from random causal scores, the expected attn_latent_out in float64 (the answer kit's
documented op, python/mlaconf_answer/ops.py). Then answers it with emulations of kernels and judges each
with `mlaconf compare --json`:

  f32         correct, float32 arithmetic
  bf16        correct bf16 kernel: q, cache rounded to bf16; scores and softmax in f32; P rounded to bf16
              for the PV product (as tensor-core kernels do); output rounded to bf16
  fp8-cache   correct kernel over FlashMLA's fp8 sparse-decode cache: the 512 latent values in e4m3 with
              one float32 scale per 128 values, the 64 rope values in bf16; the rest as bf16
  bf16-dense  the seed's bug: every causal key attended, the indexer's selection ignored
  bf16-drop1  a listing bug: the last listed key dropped on every row whose top-k is full
  fp8-dense   the seed's bug over the fp8 cache

Prints a line per answer (verdict, whole-tensor nmse, worst row and its row nmse, failing rows, diagnosis)
and writes OUT/row_verdict_glm5.json. Needs numpy and h5py (and the answer kit: python/ on PYTHONPATH).
"""
import argparse
import json
import os
import subprocess
import sys
import time

import h5py
import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
from mlaconf_answer import Answer, as_bfloat16  # noqa: E402

H, L, R, K = 64, 512, 64, 2048
SCALE = 256 ** -0.5


def bf16(x):
    """Rounds to bfloat16 (nearest even), returned as float32."""
    a = np.ascontiguousarray(np.asarray(x, dtype=np.float32))
    bits = a.view(np.uint32).astype(np.uint64)
    r = (((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) << 16).astype(np.uint32)
    return r.view(np.float32)


def e4m3(x):
    """Rounds to float8 e4m3fn (3 mantissa bits, min normal 2^-6, subnormal step 2^-9, max 448)."""
    x = np.asarray(x, dtype=np.float64)
    ax = np.abs(x)
    e = np.floor(np.log2(np.maximum(ax, 2.0 ** -12)))
    e = np.maximum(e, -6)
    step = 2.0 ** (e - 3)
    r = np.round(ax / step) * step
    return np.sign(x) * np.minimum(r, 448.0)


def set_dims(h, l, r, k):
    global H, L, R, K
    H, L, R, K = h, l, r, k


def fp8_cache(cache):
    """FlashMLA's fp8 sparse-decode layout, dequantized: latent in e4m3 per 128-value blocks with a
    float32 scale (amax / 448), rope part in bf16."""
    c = np.asarray(cache, dtype=np.float64)
    out = np.empty_like(c)
    blk_w = min(128, L)
    for b in range(0, L, blk_w):
        blk = c[:, b:b + blk_w]
        s = np.abs(blk).max(axis=1, keepdims=True) / 448.0
        s[s == 0] = 1
        out[:, b:b + blk_w] = e4m3(blk / s) * s.astype(np.float32)
    out[:, L:] = bf16(c[:, L:])
    return out


def attention(q, cache, rows, mode, dtype):
    """[T,H,L] outputs of the rows' key lists. mode: f64 | f32 | bf16 (P and output rounded)."""
    T = q.shape[0]
    out = np.zeros((T, H, L), dtype=np.float64)
    for t in range(T):
        idx = rows[t]
        kv = cache[idx].astype(dtype)
        s = (SCALE * (q[t].astype(dtype) @ kv.T)).astype(dtype)
        p = np.exp(s - s.max(axis=1, keepdims=True))
        den = p.sum(axis=1, keepdims=True)
        if mode == "bf16":
            o = (bf16(p).astype(dtype) @ kv[:, :L]) / den
        else:
            o = (p / den) @ kv[:, :L]
        out[t] = o
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("mlaconf")
    ap.add_argument("--tokens", type=int, default=0, help="default: top_k + 32")
    ap.add_argument("--heads", type=int, default=H)
    ap.add_argument("--latent", type=int, default=L)
    ap.add_argument("--rope", type=int, default=R)
    ap.add_argument("--top-k", type=int, default=K)
    ap.add_argument("--out", default="out/row_verdict_glm5")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--variants", default="", help="comma list of the variants to run (default: all)")
    ap.add_argument("--precision-of", default="", help="NAME=PREC,...: judge these variants at another precision")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    set_dims(a.heads, a.latent, a.rope, a.top_k)
    T = a.tokens or K + 32
    rng = np.random.default_rng(a.seed)
    q = rng.standard_normal((T, H, L + R)).astype(np.float32)
    cache = rng.standard_normal((T, L + R)).astype(np.float32)
    # The indexer's choice: top-k of random causal scores (every key while t + 1 <= K), ascending.
    topk = -np.ones((T, K), dtype=np.int32)
    gap = np.full(T, np.nan)
    rows = []
    for t in range(T):
        if t + 1 <= K:
            sel = np.arange(t + 1)
        else:
            sc = rng.standard_normal(t + 1)
            order = np.argsort(-sc, kind="stable")
            sel = np.sort(order[:K])
            gap[t] = sc[order[K - 1]] - sc[order[K]]
        topk[t, :len(sel)] = sel
        rows.append(sel)
    cfg = {"n_embd": 6144, "n_head": H, "q_lora_rank": 2048, "kv_lora_rank": L, "qk_rope": R, "key_length_mla": 256,
           "value_length_mla": 256, "indexer_n_head": 32, "indexer_head_size": 128, "indexer_top_k": K, "n_expert": 256,
           "n_expert_used": 8, "n_vocab": 154880, "n_layer": 1, "n_nextn_layer": 0}
    case = f"forward(tokens={T},precision=f64)"
    fx = os.path.join(a.out, f"expected-{T}-h{H}-k{K}.h5")
    # The same seed draws the same inputs: an expected file written by an earlier run is reused.
    reuse = os.path.exists(fx) and h5py.File(fx, "r").attrs.get("seed", -1) == a.seed
    t0 = time.time()
    expected = None if reuse else attention(q.astype(np.float64), cache.astype(np.float64), rows, "f64", np.float64)
    print(f"expected (float64): {'reused ' + fx if reuse else f'{time.time() - t0:.1f} s'}", flush=True)

    if not reuse:
        with h5py.File(fx, "w") as f:
            f.attrs["mlaconf_schema_version"] = 1
            f.attrs["seed"] = a.seed
            f.attrs["producer"] = "bench/row_verdict_glm5.py"
            f.attrs["model_config_json"] = json.dumps(cfg)
            f.attrs["gguf_digest"] = "sha256:none (synthetic op-level fixture)"
            f.attrs["cases"] = json.dumps([case])
            g = f.create_group(case)
            g.attrs["kind"] = "full_forward"
            g.attrs["case_name"] = case
            g.attrs["precision"] = "f64"
            g.attrs["pos0"] = 0
            g["input_ids"] = np.arange(T, dtype=np.int32) % 1000
            lg = g.create_group("layers/0")
            lg["q_absorbed"] = q
            lg["latent_cache"] = cache
            lg["indexer_topk"] = topk
            lg["indexer_topk_gap"] = gap
            lg["attn_latent_out"] = expected.astype(np.float32)

    dense = [np.arange(t + 1) for t in range(T)]
    drop1 = [r[:-1] if len(r) == K else r for r in rows]
    c8 = fp8_cache(cache)
    qb, cb = bf16(q), bf16(cache)
    variants = {
        "f32": (lambda: attention(q, cache, rows, "f32", np.float32).astype(np.float32), "f32"),
        "bf16": (lambda: as_bfloat16(attention(qb, cb, rows, "bf16", np.float32)), "bf16"),
        "fp8-cache": (lambda: as_bfloat16(attention(qb, c8.astype(np.float32), rows, "bf16", np.float32)), "bf16"),
        "bf16-dense": (lambda: as_bfloat16(attention(qb, cb, dense, "bf16", np.float32)), "bf16"),
        "bf16-drop1": (lambda: as_bfloat16(attention(qb, cb, drop1, "bf16", np.float32)), "bf16"),
        "fp8-dense": (lambda: as_bfloat16(attention(qb, c8.astype(np.float32), dense, "bf16", np.float32)), "bf16"),
    }
    results = {}
    only = [v for v in a.variants.split(",") if v]
    judge_at = dict(x.split("=") for x in a.precision_of.split(",") if x)
    for name, (fn, prec) in variants.items():
        if only and name not in only:
            continue
        t0 = time.time()
        out = fn()
        ans = Answer(fx, precision=prec, backend=f"bench {name}")
        ans.register("sparse_mla", lambda q_absorbed, out=out: out)
        ans.run()
        ap_ = os.path.join(a.out, f"answer-{T}-h{H}-k{K}-{name}.h5")
        ans.write(ap_)
        js = os.path.join(a.out, f"compare-{T}-h{H}-k{K}-{name}.json")
        extra = ["--precision", judge_at[name]] if name in judge_at else []
        rc = subprocess.run([a.mlaconf, "compare", fx, ap_, "--json", js] + extra, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE).returncode
        rep = json.load(open(js))
        d = [x for x in rep["datasets"] if x["op"] == "attn_latent_out"][0]
        rv = d.get("row_verdict", {})
        results[name] = {"rc": rc, "verdict": d["verdict"], "nmse": d["nmse"], "bound": d.get("tol", {}).get("nmse"),
                         "worst_row": rv.get("worst_row"), "worst_row_nmse": rv.get("worst_row_nmse"),
                         "row_bound": rv.get("row_nmse_bound"), "rows_failed": rv.get("rows_failed"),
                         "failed_rows": rv.get("failed_rows"), "diagnosis": rv.get("diagnosis"), "max_rel": d["max_rel"],
                         "one_minus_cosine": d["one_minus_cosine"], "contrast": rv.get("past_top_k_contrast"),
                         "precision": d.get("precision"), "seconds": time.time() - t0}
        r = results[name]
        print(f"{name:11s} rc={rc} {d['verdict']:4s} nmse {d['nmse']:.3g} (bound {r['bound']}) worst row {r['worst_row']} "
              f"row nmse {r['worst_row_nmse']:.3g} (row bound {r['row_bound']}) rows failed {r['rows_failed']} "
              f"{json.dumps(r['failed_rows'][:4])} max_rel {r['max_rel']:.3g} 1-cos {r['one_minus_cosine']:.3g} "
              f"contrast {r['contrast']} at {r['precision']}: {r['diagnosis']}", flush=True)
        os.remove(ap_)
    with open(os.path.join(a.out, f"row_verdict-{T}-h{H}-k{K}{'-' + '-'.join(only) if only else ''}.json"), "w") as f:
        json.dump({"tokens": T, "top_k": K, "heads": H, "seed": a.seed, "results": results}, f, indent=1)


if __name__ == "__main__":
    main()
