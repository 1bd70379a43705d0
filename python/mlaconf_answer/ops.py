"""The ops a fixture holds the exact inputs of, and a plain numpy version of each (float64).

An op is named by what it computes; its inputs are datasets of layers/<l>/ (fixtures/SCHEMA.md) passed
under the parameter names below, plus scalars from the model config; its outputs are the datasets the
answer holds. A user's function receives the parameters it names (any subset, in any order) and returns
the outputs: one array for a one-output op, else a tuple in the order of `outputs` or a dict by name.

  sparse_mla   q_absorbed [T,H,C], latent_cache [S,C], topk [T,K] (int32, -1 padded), scale, kv_lora, pos0
               -> attn_latent_out [T,H,kv_lora]
      o[t,h] = sum_{s in topk[t], s >= 0} softmax_s(scale * q_absorbed[t,h] . latent_cache[s])
                                           * latent_cache[s, :kv_lora]
      C = kv_lora + qk_rope (576 on GLM-5); scale = (qk_nope + qk_rope)^-1/2 (256^-1/2 on GLM-5, NOT 576^-1/2);
      decode cases: latent_cache is the whole cache, topk indexes into it.
  indexer      q [T,Hi,Di], k [S,Di], weights [T,Hi], pos0, top_k
               -> indexer_scores [T,S] (-inf after the query), indexer_topk [T,K] (ascending, -1 padded)
      I[t,s] = sum_h weights[t,h] * Hi^-1/2 * Di^-1/2 * relu(q[t,h] . k[s]) for s <= pos0 + t;
      top-k: the min(top_k, pos0 + t + 1) largest, ties to the lower index, ascending.
"""
import numpy as np


class OpSpec:
    def __init__(self, name, inputs, scalars, outputs):
        self.name = name
        self.inputs = inputs                    # parameter name -> dataset name under layers/<l>/
        self.scalars = scalars                  # parameter names filled from the config / case
        self.outputs = outputs                  # dataset names the answer holds, in tuple order
        self.input_datasets = list(inputs.values())

    def params(self):
        return list(self.inputs) + list(self.scalars)


OPS = {
    "sparse_mla": OpSpec("sparse_mla",
                         {"q_absorbed": "q_absorbed", "latent_cache": "latent_cache", "topk": "indexer_topk"},
                         ["scale", "kv_lora", "pos0"],
                         ["attn_latent_out"]),
    "indexer": OpSpec("indexer",
                      {"q": "indexer_q", "k": "indexer_k", "weights": "indexer_weights"},
                      ["pos0", "top_k"],
                      ["indexer_scores", "indexer_topk"]),
}


def sparse_mla(q_absorbed, latent_cache, topk, scale, kv_lora):
    """numpy, float64: the sparse MLA of one case and layer (see the module doc)."""
    q = np.asarray(q_absorbed, dtype=np.float64)
    cache = np.asarray(latent_cache, dtype=np.float64)
    T, H, _ = q.shape
    out = np.zeros((T, H, kv_lora))
    for t in range(T):
        kv = cache[topk[t][topk[t] >= 0]]                     # [n, C]
        s = scale * q[t] @ kv.T                                # [H, n]
        p = np.exp(s - s.max(axis=1, keepdims=True))
        p /= p.sum(axis=1, keepdims=True)
        out[t] = p @ kv[:, :kv_lora]
    return out


def dense_mla(q_absorbed, latent_cache, scale, kv_lora, pos0):
    """numpy, float64: dense causal attention over every cached key, the indexer ignored. WRONG on
    purpose (a negative control): it equals sparse_mla only while no query has more than top_k keys."""
    q = np.asarray(q_absorbed, dtype=np.float64)
    cache = np.asarray(latent_cache, dtype=np.float64)
    T = q.shape[0]
    every_causal_key = np.full((T, pos0 + T), -1, dtype=np.int64)
    for t in range(T):
        every_causal_key[t, :pos0 + t + 1] = np.arange(pos0 + t + 1)
    return sparse_mla(q, cache, every_causal_key, scale, kv_lora)


def indexer(q, k, weights, pos0, top_k):
    """numpy, float64: the DSA lightning indexer (see the module doc) -> (scores [T,S], topk [T,top_k])."""
    q = np.asarray(q, dtype=np.float64)
    k = np.asarray(k, dtype=np.float64)
    w = np.asarray(weights, dtype=np.float64)
    T, Hi, Di = q.shape
    S = k.shape[0]
    dots = np.einsum("thd,sd->ths", q, k)                     # [T, Hi, S]
    scores = np.einsum("th,ths->ts", w * (Hi ** -0.5) * (Di ** -0.5), np.maximum(dots, 0.0))
    causal = np.arange(S)[None, :] <= (pos0 + np.arange(T))[:, None]
    scores = np.where(causal, scores, -np.inf)
    topk = np.full((T, top_k), -1, dtype=np.int32)
    for t in range(T):
        n = int(causal[t].sum())
        order = np.argsort(-scores[t, :n], kind="stable")      # descending, the lower index first on ties
        kk = min(top_k, n)
        topk[t, :kk] = np.sort(order[:kk])
    return scores, topk
