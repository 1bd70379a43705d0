#!/usr/bin/env python3
"""An independent float64 numpy forward of a glm-dsa / deepseek32 GGUF, for cross-checking the C++
reference on models the shared oracle does not cover (other dims, group-limited routing, shared indexer
layers, NeoX indexer RoPE, YaRN). Weights come from llama.cpp's own gguf-py dequantizer. It follows
transformers' structure rather than the reference's: full recompute, naive MLA with an additive mask
over the full score matrix, experts looped by id.

usage: np_forward.py MODEL.gguf IDS(comma-separated) OUT.h5
exit 77 when gguf-py / numpy / h5py are missing (the C++ test skips)."""
import sys

try:
    import numpy as np
    import h5py
    from gguf import GGUFReader
    from gguf.quants import dequantize
except ImportError as e:  # pragma: no cover
    print("np_forward: missing module:", e, file=sys.stderr)
    sys.exit(77)


def load(path):
    r = GGUFReader(path)
    kv = {name: f.contents() for name, f in r.fields.items()}
    W = {}
    for t in r.tensors:
        a = dequantize(t.data, t.tensor_type).astype(np.float64)
        W[t.name] = a.reshape([int(x) for x in reversed(list(t.shape))])  # numpy order: ne reversed
    return kv, W


def rms(x, w, eps):
    return w * (x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps))


def layernorm(x, w, b, eps):
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return w * (x - mu) / np.sqrt(var + eps) + b


def inv_freq(dim, theta, factor, orig):
    f = 1.0 / theta ** (np.arange(0, dim, 2, dtype=np.float64) / dim)
    if factor and factor > 1 and orig:
        # transformers _compute_yarn_parameters with beta_fast 32, beta_slow 1, truncate
        def corr(rot):
            return dim * np.log(orig / (rot * 2 * np.pi)) / (2 * np.log(theta))
        lo, hi = max(np.floor(corr(32.0)), 0), min(np.ceil(corr(1.0)), dim - 1)
        if lo == hi:
            hi += 0.001
        ramp = np.clip((np.arange(dim // 2) - lo) / (hi - lo), 0, 1)
        extra = 1 - ramp
        f = (f / factor) * (1 - extra) + f * extra
    return f


def rope(x, cos, sin, neox):
    """x [..., T, d] rotated along the last axis; cos/sin [T, d/2]."""
    y = x.copy()
    if neox:
        h = x.shape[-1] // 2
        a, b = x[..., :h], x[..., h:]
        y[..., :h] = a * cos - b * sin
        y[..., h:] = b * cos + a * sin
    else:
        a, b = x[..., 0::2], x[..., 1::2]
        y[..., 0::2] = a * cos - b * sin
        y[..., 1::2] = b * cos + a * sin
    return y


def stable_topk(v, k):
    """indices of the k largest, ties to the lower index"""
    return np.argsort(-v, kind="stable")[:k]


def main():
    path, ids_s, out = sys.argv[1], sys.argv[2], sys.argv[3]
    ids = np.array([int(x) for x in ids_s.split(",")])
    kv, W = load(path)
    arch = kv["general.architecture"]
    g = lambda k, d=None: kv.get(arch + "." + k, d)
    n_layer = g("block_count") - g("nextn_predict_layers", 0)
    E, H = g("embedding_length"), g("attention.head_count")
    dl, R = g("attention.kv_lora_rank"), g("rope.dimension_count")
    dq = g("attention.key_length_mla")
    dn = dq - R
    eps = float(np.float32(g("attention.layer_norm_rms_epsilon")))
    Hi, Di, topk = g("attention.indexer.head_count"), g("attention.indexer.key_length"), g("attention.indexer.top_k")
    full = g("attention.indexer.types", [True] * g("block_count"))
    lead = g("leading_dense_block_count")
    n_exp, n_used = g("expert_count"), g("expert_used_count")
    n_group, n_gused = g("expert_group_count", 1), g("expert_group_used_count", 1)
    wnorm, wscale = g("expert_weights_norm"), g("expert_weights_scale")
    factor = g("rope.scaling.factor", 0.0)
    scale = dq ** -0.5
    if factor and factor > 1 and g("rope.scaling.yarn_log_multiplier", 0):
        m = 1 + g("rope.scaling.yarn_log_multiplier") * np.log(factor)
        scale *= m * m
    neox_idx = arch == "deepseek32"
    T = len(ids)
    f = inv_freq(R, g("rope.freq_base"), factor, g("rope.scaling.original_context_length", 0))
    ang = np.arange(T, dtype=np.float64)[:, None] * f[None, :]
    cos, sin = np.cos(ang), np.sin(ang)
    causal = np.tril(np.ones((T, T), dtype=bool))

    h = W["token_embd.weight"][ids]
    res = {}
    sel = None
    for l in range(n_layer):
        b = lambda s: W[f"blk.{l}.{s}"]
        x = rms(h, b("attn_norm.weight"), eps)
        cq = rms(x @ b("attn_q_a.weight").T, b("attn_q_a_norm.weight"), eps)
        q = (cq @ b("attn_q_b.weight").T).reshape(T, H, dq).transpose(1, 0, 2)  # [H, T, dq]
        q_nope, q_pe = q[..., :dn], rope(q[..., dn:], cos, sin, False)
        kva = x @ b("attn_kv_a_mqa.weight").T
        c = rms(kva[:, :dl], b("attn_kv_a_norm.weight"), eps)
        k_pe = rope(kva[:, dl:], cos, sin, False)
        if full[l]:
            qi = (cq @ b("indexer.attn_q_b.weight").T).reshape(T, Hi, Di).transpose(1, 0, 2)  # [Hi, T, Di]
            qi = np.concatenate([rope(qi[..., :R], cos, sin, neox_idx), qi[..., R:]], -1)
            ki = layernorm(x @ b("indexer.attn_k.weight").T, b("indexer.k_norm.weight"), b("indexer.k_norm.bias"), 1e-6)
            ki = np.concatenate([rope(ki[:, :R], cos, sin, neox_idx), ki[:, R:]], -1)
            w = x @ b("indexer.proj.weight").T  # [T, Hi]
            score = np.einsum("hst,sh->st", np.maximum(qi @ ki.T, 0), w) * (Hi * Di) ** -0.5
            score = np.where(causal, score, -np.inf)
            sel = np.zeros((T, T), dtype=bool)
            idx = -np.ones((T, topk), dtype=np.int32)
            for s in range(T):
                keep = np.sort(stable_topk(score[s, : s + 1], min(topk, s + 1)))
                sel[s, keep] = True
                idx[s, : len(keep)] = keep
            res[f"layers/{l}/indexer_topk"] = idx
        kb, vb = b("attn_k_b.weight"), b("attn_v_b.weight")  # [H, dl, dn], [H, dv, dl]
        heads = []
        for hh in range(H):
            k_nope = c @ kb[hh]       # [T, dn]
            v = c @ vb[hh].T          # [T, dv]
            sc = (q_nope[hh] @ k_nope.T + q_pe[hh] @ k_pe.T) * scale
            sc = np.where(sel & causal, sc, -np.inf)
            p = np.exp(sc - sc.max(-1, keepdims=True))
            p /= p.sum(-1, keepdims=True)
            heads.append(p @ v)
        attn = np.concatenate(heads, -1) @ b("attn_output.weight").T
        h = h + attn
        y = rms(h, b("ffn_norm.weight"), eps)
        if l < lead:
            mlp = (lambda gg, uu: (gg / (1 + np.exp(-gg)) * uu))(y @ b("ffn_gate.weight").T, y @ b("ffn_up.weight").T) @ b("ffn_down.weight").T
        else:
            logits = y @ b("ffn_gate_inp.weight").T
            prob = 1 / (1 + np.exp(-logits))
            bias = W.get(f"blk.{l}.exp_probs_b.bias", np.zeros(n_exp))
            ids_l = np.zeros((T, n_used), dtype=np.int32)
            wts = np.zeros((T, n_used))
            mlp = np.zeros_like(y)
            for t in range(T):
                ch = prob[t] + bias
                if n_group > 1:
                    per = n_exp // n_group
                    gs = np.array([np.sort(ch[gi * per:(gi + 1) * per])[::-1][:2].sum() for gi in range(n_group)])
                    keep = stable_topk(gs, n_gused)
                    mask = np.repeat(np.isin(np.arange(n_group), keep), per)
                    ch = np.where(mask, ch, -np.inf)
                sel_e = np.sort(stable_topk(ch, n_used))
                ww = prob[t][sel_e]
                if wnorm:
                    ww = ww / (ww.sum() + 1e-20)
                ww = ww * wscale
                ids_l[t], wts[t] = sel_e, ww
                for e, we in zip(sel_e, ww):
                    gg = b("ffn_gate_exps.weight")[e] @ y[t]
                    uu = b("ffn_up_exps.weight")[e] @ y[t]
                    mlp[t] += we * (b("ffn_down_exps.weight")[e] @ (gg / (1 + np.exp(-gg)) * uu))
            if f"blk.{l}.ffn_gate_shexp.weight" in W:
                gg, uu = y @ b("ffn_gate_shexp.weight").T, y @ b("ffn_up_shexp.weight").T
                mlp += (gg / (1 + np.exp(-gg)) * uu) @ b("ffn_down_shexp.weight").T
            res[f"layers/{l}/router_ids"] = ids_l
            res[f"layers/{l}/router_weights"] = wts
        h = h + mlp
        res[f"layers/{l}/attn_out"] = attn
        res[f"layers/{l}/mlp_out"] = mlp
        res[f"layers/{l}/output_hidden"] = h
    fn = rms(h, W["output_norm.weight"], eps)
    res["final_norm"] = fn
    res["logits"] = fn @ W["output.weight"].T
    with h5py.File(out, "w") as o:
        for k, v in res.items():
            o[k] = v


if __name__ == "__main__":
    main()
