#!/usr/bin/python3
"""Answer one layer's sparse MLA of an mlaconf fixture with numpy, the shape of a user's own kernel.

    python3 numpy_sparse_mla.py golden.h5 answer.h5 [--layer 1] [--wrong-scale | --dense]
    mlaconf compare golden.h5 answer.h5             # exit 0: pass

--wrong-scale and --dense are the two classic bugs, wrong on purpose; compare must fail both on
layers/<l>/attn_latent_out and nothing else:
  --wrong-scale  softmax scale (kv_lora + qk_rope)^-1/2 = 576^-1/2 (the width of the absorbed query,
                 what FlashMLA-style kernels default to) instead of (qk_nope + qk_rope)^-1/2 = 256^-1/2;
  --dense        every causal key instead of the indexer's top-k (fails once the context exceeds top_k).
"""
import argparse
import sys

import numpy as np

try:
    import mlaconf_answer as ma
except ImportError:  # run from a checkout without `pip install ./python`
    import os
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    import mlaconf_answer as ma


def sparse_mla(q_absorbed, latent_cache, topk, scale, kv_lora):
    """q_absorbed [T,H,576], latent_cache [S,576], topk [T,K] int32 (-1 = no key) -> [T,H,512]."""
    out = np.zeros(q_absorbed.shape[:2] + (kv_lora,))
    for t in range(q_absorbed.shape[0]):
        kv = latent_cache[topk[t][topk[t] >= 0]].astype(np.float64)   # [n,576]: the selected cache rows
        s = scale * q_absorbed[t].astype(np.float64) @ kv.T             # [H,n]
        p = np.exp(s - s.max(axis=1, keepdims=True))
        p /= p.sum(axis=1, keepdims=True)
        out[t] = p @ kv[:, :kv_lora]                                    # values = the latent part
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("fixture")
    ap.add_argument("answer")
    ap.add_argument("--layer", type=int, default=1)
    bug = ap.add_mutually_exclusive_group()
    bug.add_argument("--wrong-scale", action="store_true", help="wrong on purpose: 576^-1/2")
    bug.add_argument("--dense", action="store_true", help="wrong on purpose: dense causal attention")
    a = ap.parse_args()

    ans = ma.Answer(a.fixture, precision="f64", backend="numpy example" + (" --wrong-scale" if a.wrong_scale else " --dense" if a.dense else ""))

    @ans.register("sparse_mla", layers=[a.layer])
    def answer(q_absorbed, latent_cache, topk, scale, kv_lora, pos0):
        if a.wrong_scale:
            scale = q_absorbed.shape[-1] ** -0.5
        if a.dense:
            topk = np.stack([np.where(np.arange(latent_cache.shape[0]) <= pos0 + t, np.arange(latent_cache.shape[0]), -1)
                             for t in range(q_absorbed.shape[0])])
        return sparse_mla(q_absorbed, latent_cache, topk, scale, kv_lora)

    n = ans.run().write(a.answer)
    print(f"numpy_sparse_mla.py: answered {n} dataset(s) of layer {a.layer} -> {a.answer}")


if __name__ == "__main__":
    try:
        main()
    except ma.FixtureError as e:
        print(f"numpy_sparse_mla.py: error: {e}", file=sys.stderr)
        sys.exit(2)
