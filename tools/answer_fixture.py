#!/usr/bin/python3
"""Answer an mlaconf fixture from outside C++: numpy + h5py only.

Reads, for every case and layer of FIXTURE that holds the op-level inputs, the exact inputs of two
operations, computes them here in float64, and writes an answer file in the fixture schema
(fixtures/SCHEMA.md) that `mlaconf compare FIXTURE ANSWER` judges:

  DSA lightning indexer   inputs  layers/<l>/indexer_q [T,Hi,Di], indexer_k [S,Di], indexer_weights [T,Hi]
                          answers layers/<l>/indexer_scores [T,S], indexer_topk [T,k], indexer_topk_tie, indexer_topk_gap
      I[t,s] = sum_h w[t,h] * Hi^-1/2 * Di^-1/2 * relu(q[t,h] . k[s]),  -inf for s > pos0 + t (causal);
      top-k: the k = min(top_k, causal keys) largest, ties to the lower index, ascending, -1 padded.
  sparse MLA (absorbed)   inputs  layers/<l>/q_absorbed [T,H,C], latent_cache [S,C], indexer_topk [T,k]
                          answers layers/<l>/attn_latent_out [T,H,kv_lora]
      o[t,h] = sum_{s in topk(t)} softmax_s(scale * q[t,h] . cache[s]) * cache[s, :kv_lora],
      scale = (qk_nope + qk_rope)^-1/2 (times mscale^2 under DeepSeek YaRN).

--dense is a deliberately wrong answer (dense causal attention, the indexer ignored): compare must fail it
whenever some query has more causal keys than top_k.

usage: answer_fixture.py FIXTURE.h5 ANSWER.h5 [--case NAME] [--dense]
"""
import argparse
import json
import math
import os
import sys

import h5py
import numpy as np


def config(f):
    cfg = json.loads(f.attrs["model_config_json"])
    return cfg


def indexer(q, k, w, pos0, top_k):
    """q [T,Hi,Di], k [S,Di], w [T,Hi] -> scores [T,S], topk [T,top_k], tie [T], gap [T]."""
    T, Hi, Di = q.shape
    S = k.shape[0]
    dots = np.einsum("thd,sd->ths", q, k)                     # [T,Hi,S]
    scores = np.einsum("th,ths->ts", w * (Hi ** -0.5) * (Di ** -0.5), np.maximum(dots, 0.0))
    causal = np.arange(S)[None, :] <= (pos0 + np.arange(T))[:, None]
    scores = np.where(causal, scores, -np.inf)
    topk = np.full((T, top_k), -1, dtype=np.int32)
    tie = np.zeros(T, dtype=np.uint8)
    gap = np.full(T, np.nan)
    for t in range(T):
        n = int(causal[t].sum())
        order = np.argsort(-scores[t, :n], kind="stable")  # descending, lower index first on ties
        kk = min(top_k, n)
        topk[t, :kk] = np.sort(order[:kk])
        if n > top_k:
            a, b = scores[t, order[kk - 1]], scores[t, order[kk]]
            gap[t] = a - b
            tie[t] = 1 if a == b else 0
    return scores, topk, tie, gap


def sparse_mla(qabs, cache, topk, pos0, kv_lora, scale, dense):
    """qabs [T,H,C], cache [S,C], topk [T,k] -> attn_latent_out [T,H,kv_lora]."""
    T, H, C = qabs.shape
    out = np.zeros((T, H, kv_lora))
    for t in range(T):
        if dense:
            sel = np.arange(pos0 + t + 1)
        else:
            sel = topk[t][topk[t] >= 0]
        kv = cache[sel]                                        # [n,C]
        s = scale * qabs[t] @ kv.T                             # [H,n]
        s = s - s.max(axis=1, keepdims=True)
        p = np.exp(s)
        p /= p.sum(axis=1, keepdims=True)
        out[t] = p @ kv[:, :kv_lora]
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("fixture")
    ap.add_argument("answer")
    ap.add_argument("--case", help="answer only this case")
    ap.add_argument("--dense", action="store_true", help="wrong on purpose: dense instead of sparse attention")
    a = ap.parse_args()

    try:
        fin = h5py.File(a.fixture, "r")
    except OSError as e:
        print(f"answer_fixture.py: {a.fixture}: cannot open as HDF5: {e}", file=sys.stderr)
        return 2
    if "mlaconf_schema_version" not in fin.attrs:
        print(f"answer_fixture.py: {a.fixture}: not an mlaconf fixture (no mlaconf_schema_version)", file=sys.stderr)
        return 2
    if int(fin.attrs["mlaconf_schema_version"]) != 1:
        print(f"answer_fixture.py: {a.fixture}: schema version {int(fin.attrs['mlaconf_schema_version'])}, this script reads 1", file=sys.stderr)
        return 2
    cfg = config(fin)
    top_k = int(cfg["indexer_top_k"])
    kv_lora = int(cfg["kv_lora_rank"])
    scale = 1.0 / math.sqrt(cfg["key_length_mla"])
    if cfg.get("rope_scaling_factor", 0) > 1 and cfg.get("rope_yarn_log_multiplier", 0) > 0:
        m = 1.0 + cfg["rope_yarn_log_multiplier"] * math.log(cfg["rope_scaling_factor"])
        scale *= m * m

    tmp = a.answer + f".tmp.{os.getpid()}"
    n_answered = 0
    with h5py.File(tmp, "w") as fout:
        for key in fin.attrs:
            if key == "mlaconf_schema_version" or key == "model_config_json" or key.startswith("gguf_"):
                fout.attrs[key] = fin.attrs[key]
        fout.attrs["producer"] = "tools/answer_fixture.py" + (" --dense (wrong on purpose)" if a.dense else "")
        fout.attrs["producer_version"] = "1"
        names = []
        for case in fin:
            if a.case and case != a.case:
                continue
            g = fin[case]
            if "layers" not in g:
                continue
            pos0 = int(g.attrs.get("pos0", 0))
            answers = []
            og = None
            for l in sorted(g["layers"], key=int):
                lg = g["layers"][l]
                def arr(n):
                    return np.asarray(lg[n][...], dtype=np.float64)
                if og is None:
                    og = fout.create_group(case)
                if all(n in lg for n in ("indexer_q", "indexer_k", "indexer_weights")):
                    sc, tk, tie, gap = indexer(arr("indexer_q"), arr("indexer_k"), arr("indexer_weights"), pos0, top_k)
                    p = f"layers/{l}/"
                    og[p + "indexer_scores"] = sc.astype(np.float32)
                    og[p + "indexer_topk"] = tk
                    og[p + "indexer_topk_tie"] = tie
                    og[p + "indexer_topk_gap"] = gap
                    answers += [p + "indexer_scores", p + "indexer_topk"]
                if all(n in lg for n in ("q_absorbed", "latent_cache", "indexer_topk")):
                    out = sparse_mla(arr("q_absorbed"), arr("latent_cache"), np.asarray(lg["indexer_topk"][...]), pos0, kv_lora, scale, a.dense)
                    og[f"layers/{l}/attn_latent_out"] = out.astype(np.float32)
                    answers.append(f"layers/{l}/attn_latent_out")
            if og is None or not answers:
                if og is not None:
                    del fout[case]
                continue
            og["input_ids"] = np.asarray(g["input_ids"][...], dtype=np.int32)
            og.attrs["kind"] = "op_answer"
            og.attrs["case_name"] = case
            og.attrs["precision"] = "f64"
            og.attrs["backend"] = "python-numpy" + (" dense (wrong on purpose)" if a.dense else "")
            og.attrs["pos0"] = pos0
            og.attrs["answers"] = json.dumps(answers)
            names.append(case)
            n_answered += len(answers)
        fout.attrs["cases"] = json.dumps(names)
    if n_answered == 0:
        os.remove(tmp)
        print(f"answer_fixture.py: {a.fixture}: no case holds the op-level inputs (indexer_q/k/weights, q_absorbed, latent_cache)", file=sys.stderr)
        return 2
    os.replace(tmp, a.answer)
    print(f"answer_fixture.py: answered {n_answered} datasets in {len(names)} case(s) -> {a.answer}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
