#!/usr/bin/env python3
"""HF transformers float64 oracle for a glm-dsa / deepseek32 GGUF (see docs/HF_CROSSCHECK.md).

Reads a GGUF with llama.cpp's own gguf-py (reader + numpy dequantizer), builds the Hugging Face config
and state dict (kv_b re-joined from attn_k_b / attn_v_b, experts fused), runs the stock
GlmMoeDsaForCausalLM / DeepseekV32ForCausalLM on CPU in float64 and writes an HDF5 file in the layout
of ../shared/models/glm-dsa-tiny.oracle.h5 (one group per case).

Conventions (the shared oracle's, ../shared/README.md):
  * every RMSNorm uses the GGUF's attention.layer_norm_rms_epsilon, incl. q_a / kv_a latent norms
    (stock HF builds those two with 1e-6); the indexer k_norm LayerNorm keeps eps 1e-6;
  * top-k (indexer, router, router groups) ties go to the LOWER index: torch.topk / Tensor.topk are
    replaced by a stable descending sort while the model runs;
  * float64 everywhere: an aten-level dispatch mode rewrites every float32 (or 16-bit) dtype request
    to float64 (the stock code's .float(), .to(float32), .type(float32), softmax(dtype=float32),
    float32 arange/zeros factories), and a second audit mode verifies that no op of the patched run
    produced a float32/16 tensor. The drop points themselves are found by running the stock code in
    float64 under an audit mode that records the Python source line of every float64 -> float32 op.

Usage (on the GPU host; CPU is enough):
  make_oracle.py --gguf M.gguf --out M.h5 --tokens 48 --prompt-seed 1 --greedy 4 [--label NAME]
  make_oracle.py --gguf M.gguf --dry-run     (no torch: GGUF, config and state-dict shapes only)
"""
import argparse
import collections
import hashlib
import json
import os
import sys
import time
import traceback

import numpy as np


# ----------------------------------------------------------------------------------------------------
# GGUF
# ----------------------------------------------------------------------------------------------------
def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 24), b""):
            h.update(chunk)
    return h.hexdigest()


def field_value(field):
    import gguf
    try:
        return field.contents()
    except AttributeError:
        pass
    vt = field.types[0]
    if vt == gguf.GGUFValueType.ARRAY:
        et = field.types[1]
        if et == gguf.GGUFValueType.STRING:
            return [bytes(field.parts[i]).decode("utf-8") for i in field.data]
        return [field.parts[i].tolist()[0] for i in field.data]
    if vt == gguf.GGUFValueType.STRING:
        return bytes(field.parts[field.data[0]]).decode("utf-8")
    return field.parts[field.data[0]].tolist()[0]


def load_gguf(path):
    """(meta, arch, tensors): tensors map name -> float64 numpy array in numpy order (ne reversed)."""
    import gguf
    from gguf import quants
    r = gguf.GGUFReader(path)
    meta = {}
    for name, field in r.fields.items():
        if name.startswith("tokenizer."):
            continue
        try:
            meta[name] = field_value(field)
        except Exception:  # a key we do not need
            pass
    arch = meta["general.architecture"]
    tensors, types = {}, {}
    for t in r.tensors:
        ne = [int(x) for x in t.shape]
        a = quants.dequantize(t.data, t.tensor_type)
        a = np.asarray(a, dtype=np.float64).reshape(list(reversed(ne)))
        tensors[t.name] = a
        types[t.name] = t.tensor_type.name
    return meta, arch, tensors, types


class Cfg:
    """The GGUF hyperparameters (same keys as core/model_config.cpp)."""

    def __init__(self, meta, arch, tensors):
        p = arch + "."
        g = lambda k, d=None: meta.get(p + k, d)
        self.arch = arch
        self.n_layer = int(g("block_count")) - int(g("nextn_predict_layers", 0) or 0)
        self.ctx = int(g("context_length"))
        self.E = int(g("embedding_length"))
        self.ff = int(g("feed_forward_length"))
        self.H = int(g("attention.head_count"))
        self.q_lora = int(g("attention.q_lora_rank"))
        self.kv_lora = int(g("attention.kv_lora_rank"))
        self.k_mla = int(g("attention.key_length_mla"))
        self.v_head = int(g("attention.value_length_mla"))
        self.rope = int(g("rope.dimension_count"))
        self.nope = self.k_mla - self.rope
        self.eps = float(g("attention.layer_norm_rms_epsilon"))
        self.theta = float(g("rope.freq_base"))
        self.yarn_factor = float(g("rope.scaling.factor", 0) or 0)
        self.yarn_orig = int(g("rope.scaling.original_context_length", 0) or 0)
        self.yarn_logm = float(g("rope.scaling.yarn_log_multiplier", 0) or 0)
        self.Hi = int(g("attention.indexer.head_count"))
        self.Di = int(g("attention.indexer.key_length"))
        self.topk = int(g("attention.indexer.top_k"))
        types = g("attention.indexer.types")
        self.idx_full = [bool(x) for x in types][: self.n_layer] if types is not None else [True] * self.n_layer
        self.dense_lead = int(g("leading_dense_block_count"))
        self.n_exp = int(g("expert_count"))
        self.n_used = int(g("expert_used_count"))
        self.n_shared = int(g("expert_shared_count"))
        self.ff_exp = int(g("expert_feed_forward_length"))
        self.scale = float(g("expert_weights_scale"))
        self.norm = bool(g("expert_weights_norm"))
        self.gating = int(g("expert_gating_func", 2) or 2)
        self.groups = int(g("expert_group_count", 1) or 1)
        self.groups_used = int(g("expert_group_used_count", self.groups) or self.groups)
        self.vocab = int(tensors["output.weight"].shape[0])
        if self.gating != 2:
            raise SystemExit("only sigmoid gating (expert_gating_func 2) is what GLM-5 / V3.2 use")


def hf_config_kwargs(c):
    kw = dict(
        vocab_size=c.vocab, hidden_size=c.E, intermediate_size=c.ff, moe_intermediate_size=c.ff_exp,
        num_hidden_layers=c.n_layer, num_attention_heads=c.H, num_key_value_heads=c.H,
        n_shared_experts=c.n_shared, n_routed_experts=c.n_exp, routed_scaling_factor=c.scale,
        kv_lora_rank=c.kv_lora, q_lora_rank=c.q_lora, qk_rope_head_dim=c.rope, qk_nope_head_dim=c.nope,
        v_head_dim=c.v_head, head_dim=c.rope, n_group=c.groups, topk_group=c.groups_used,
        num_experts_per_tok=c.n_used, first_k_dense_replace=c.dense_lead, norm_topk_prob=c.norm,
        rms_norm_eps=c.eps, max_position_embeddings=c.ctx, index_topk=c.topk, index_head_dim=c.Di,
        index_n_heads=c.Hi, tie_word_embeddings=False, attention_bias=False, hidden_act="silu",
        bos_token_id=None, eos_token_id=None, pad_token_id=None, use_cache=False,
        mlp_layer_types=["dense" if l < c.dense_lead else "sparse" for l in range(c.n_layer)],
    )
    if c.yarn_factor > 1:
        mscale_all_dim = c.yarn_logm / 0.1
        kw["rope_parameters"] = dict(rope_type="yarn", rope_theta=c.theta, factor=c.yarn_factor,
                                     original_max_position_embeddings=c.yarn_orig, beta_fast=32.0, beta_slow=1.0,
                                     mscale=mscale_all_dim, mscale_all_dim=mscale_all_dim)
    else:
        kw["rope_parameters"] = dict(rope_type="default", rope_theta=c.theta)
    if c.arch == "glm-dsa":
        kw["indexer_types"] = ["full" if f else "shared" for f in c.idx_full]
    else:
        kw["rope_interleave"] = True          # MLA: interleaved (llama.cpp NORM), as the reference
        kw["indexer_rope_interleave"] = False  # DeepSeek-V3.2 indexer: NeoX halves
    return kw


def hf_state_dict(c, t):
    """HF name -> float64 numpy. Fused expert tensors use HF's [E, 2*ff, hidden] / [E, hidden, ff]."""
    sd = {"model.embed_tokens.weight": t["token_embd.weight"], "model.norm.weight": t["output_norm.weight"],
          "lm_head.weight": t["output.weight"]}
    for l in range(c.n_layer):
        b = lambda s: t[f"blk.{l}.{s}"]
        p = f"model.layers.{l}."
        sd[p + "input_layernorm.weight"] = b("attn_norm.weight")
        sd[p + "post_attention_layernorm.weight"] = b("ffn_norm.weight")
        a = p + "self_attn."
        sd[a + "q_a_proj.weight"] = b("attn_q_a.weight")
        sd[a + "q_a_layernorm.weight"] = b("attn_q_a_norm.weight")
        sd[a + "q_b_proj.weight"] = b("attn_q_b.weight")
        sd[a + "kv_a_proj_with_mqa.weight"] = b("attn_kv_a_mqa.weight")
        sd[a + "kv_a_layernorm.weight"] = b("attn_kv_a_norm.weight")
        sd[a + "o_proj.weight"] = b("attn_output.weight")
        kb = b("attn_k_b.weight")  # numpy [H, kv_lora, nope] = W_UK[h]^T
        vb = b("attn_v_b.weight")  # numpy [H, v, kv_lora]   = W_UV[h]
        assert kb.shape == (c.H, c.kv_lora, c.nope) and vb.shape == (c.H, c.v_head, c.kv_lora), (kb.shape, vb.shape)
        sd[a + "kv_b_proj.weight"] = np.concatenate(
            [np.concatenate([kb[h].T, vb[h]], axis=0) for h in range(c.H)], axis=0)  # [H*(nope+v), kv_lora]
        if f"blk.{l}.indexer.attn_q_b.weight" in t:
            sd[a + "indexer.wq_b.weight"] = b("indexer.attn_q_b.weight")
            sd[a + "indexer.wk.weight"] = b("indexer.attn_k.weight")
            sd[a + "indexer.k_norm.weight"] = b("indexer.k_norm.weight")
            sd[a + "indexer.k_norm.bias"] = b("indexer.k_norm.bias")
            sd[a + "indexer.weights_proj.weight"] = b("indexer.proj.weight")
        m = p + "mlp."
        if l < c.dense_lead:
            sd[m + "gate_proj.weight"] = b("ffn_gate.weight")
            sd[m + "up_proj.weight"] = b("ffn_up.weight")
            sd[m + "down_proj.weight"] = b("ffn_down.weight")
        else:
            sd[m + "gate.weight"] = b("ffn_gate_inp.weight")
            sd[m + "gate.e_score_correction_bias"] = b("exp_probs_b.bias")
            sd[m + "experts.gate_up_proj"] = np.concatenate([b("ffn_gate_exps.weight"), b("ffn_up_exps.weight")], axis=1)
            sd[m + "experts.down_proj"] = b("ffn_down_exps.weight")  # [E, hidden, ff]
            sd[m + "shared_experts.gate_proj.weight"] = b("ffn_gate_shexp.weight")
            sd[m + "shared_experts.up_proj.weight"] = b("ffn_up_shexp.weight")
            sd[m + "shared_experts.down_proj.weight"] = b("ffn_down_shexp.weight")
    return sd


# ----------------------------------------------------------------------------------------------------
# torch side
# ----------------------------------------------------------------------------------------------------
def torch_side():
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_leaves

    LOW = (torch.float32, torch.float16, torch.bfloat16)

    def model_frames():
        out = []
        for fr in traceback.extract_stack()[:-3]:
            if "transformers" in fr.filename and "/utils/" not in fr.filename and "modeling_utils" not in fr.filename:
                out.append(f"{os.path.basename(fr.filename)}:{fr.lineno} {fr.name}: {(fr.line or '').strip()}")
        return out

    class Fp64Mode(TorchDispatchMode):
        """Rewrites every float32/16 dtype request to float64 (the patch) and counts what it rewrote."""

        def __init__(self):
            super().__init__()
            self.rewrites = collections.Counter()
            self.sites = collections.Counter()
            self.low_outputs = collections.Counter()
            self.ops = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = dict(kwargs or {})
            if kwargs.get("dtype") in LOW:
                self.rewrites[str(func)] += 1
                fr = model_frames()
                if fr:
                    self.sites[fr[-1]] += 1
                kwargs["dtype"] = torch.float64
            out = func(*args, **kwargs)
            self.ops += 1
            for x in tree_leaves(out):
                if isinstance(x, torch.Tensor) and x.dtype in LOW:
                    self.low_outputs[str(func)] += 1
            return out

    class DropAudit(TorchDispatchMode):
        """Stock run: records the model source line of every op turning float64 into float32/16."""

        def __init__(self):
            super().__init__()
            self.sites = collections.Counter()
            self.low_ops = collections.Counter()

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            ins = [x for x in tree_leaves((args, kwargs)) if isinstance(x, torch.Tensor)]
            outs = [x for x in tree_leaves(out) if isinstance(x, torch.Tensor)]
            if any(o.dtype in LOW for o in outs):
                self.low_ops[str(func)] += 1
                if not any(i.dtype in LOW for i in ins):  # a conversion into float32/16 (or a float32 factory)
                    fr = model_frames()
                    self.sites[(fr[-1] if fr else "?") + f"  [{func}]"] += 1
            return out

    TopkResult = collections.namedtuple("topk", ["values", "indices"])
    orig_topk = torch.topk
    counts = collections.Counter()

    def stable_topk(input, k, dim=-1, largest=True, sorted=True, *, out=None):
        counts["topk"] += 1
        v, i = torch.sort(input, dim=dim, descending=largest, stable=True)
        return TopkResult(v.narrow(dim, 0, k), i.narrow(dim, 0, k))

    return torch, Fp64Mode, DropAudit, stable_topk, orig_topk, counts


def build_model(c, sd_np, log):
    import torch
    import transformers
    from transformers import AutoConfig, AutoModelForCausalLM
    model_type = "glm_moe_dsa" if c.arch == "glm-dsa" else "deepseek_v32"
    kw = hf_config_kwargs(c)
    cfg = AutoConfig.for_model(model_type, **kw)
    for k in ("mlp_layer_types", "indexer_types"):
        if k in kw and getattr(cfg, k, None) != kw[k]:
            log(f"config: {k} is {getattr(cfg, k, None)!r} after construction, wanted {kw[k]!r}; setting it")
            setattr(cfg, k, kw[k])
    torch.set_default_dtype(torch.float64)
    try:
        model = AutoModelForCausalLM.from_config(cfg, attn_implementation="eager", experts_implementation="eager")
    except Exception as e:
        log(f"from_config(experts_implementation=...) refused ({e!r}); without it")
        model = AutoModelForCausalLM.from_config(cfg, attn_implementation="eager")
    model = model.to(torch.float64).eval()
    log(f"model class {type(model).__name__}; experts impl {getattr(model.config, '_experts_implementation', None)}; "
        f"attn impl {getattr(model.config, '_attn_implementation', None)}")
    target = model.state_dict()
    sd, notes = {}, []
    log("config: " + json.dumps({k: v for k, v in cfg.to_dict().items() if "interleave" in k or "rope" in k or
                                 "indexer" in k or "layer_types" in k or "group" in k or "scoring" in k}, default=str))
    # Per-expert (unfused) layouts: split the fused tensors when HF wants mlp.experts.{j}.*.
    for k in [k for k in sd_np if k.endswith("experts.gate_up_proj") and k not in target]:
        base = k[: -len("gate_up_proj")]
        if base + "0.gate_proj.weight" in target:
            gu, dn = sd_np.pop(k), sd_np.pop(base + "down_proj")
            ff = gu.shape[1] // 2
            for j in range(gu.shape[0]):
                sd_np[f"{base}{j}.gate_proj.weight"] = gu[j, :ff]
                sd_np[f"{base}{j}.up_proj.weight"] = gu[j, ff:]
                sd_np[f"{base}{j}.down_proj.weight"] = dn[j]
            notes.append(f"{base}*: per-expert layout")
    for k, v in sd_np.items():
        if k not in target:
            pre = k.rsplit(".", 2)[0]
            print("HF parameters near it:", [t for t in target if t.startswith(pre)][:40])
            raise SystemExit(f"state dict: HF has no parameter {k}")
        want = tuple(target[k].shape)
        if v.shape != want:
            if v.ndim >= 2 and v.shape[:-2] + (v.shape[-1], v.shape[-2]) == want:
                v = np.swapaxes(v, -1, -2)
                notes.append(f"{k}: transposed last two dims to {want}")
            else:
                raise SystemExit(f"state dict: {k} is {v.shape}, HF wants {want}")
        sd[k] = torch.from_numpy(np.ascontiguousarray(v)).to(torch.float64)
    missing = [k for k in target if k not in sd and not k.endswith("inv_freq")]
    for k in missing:  # e.g. indexer weights of GLM-5.2 "shared" layers: NaN, so any use would show
        sd[k] = torch.full_like(target[k], float("nan"), dtype=torch.float64)
    res = model.load_state_dict(sd, strict=False)
    log(f"loaded: {len(sd_np)} tensors; NaN-filled (not in the GGUF): {missing}; unexpected {res.unexpected_keys}")
    if notes:
        log("layout notes: " + "; ".join(notes[:4]) + (" ..." if len(notes) > 4 else ""))
    return model, cfg, missing, notes


def patch_conventions(model, c, torch, Fp64Mode, log):
    """The oracle's conventions on a built HF model (docs/HF_CROSSCHECK.md): every RMSNorm eps = the GGUF's,
    the indexer k_norm LayerNorm eps 1e-6, RoPE inv_freq recomputed in float64. Also used by
    python/mlaconf_answer/torch_hooks.py (the torch-hooks answer of the same model)."""
    # Convention patch 1: every RMSNorm eps = the GGUF's rms eps (HF builds q_a/kv_a norms with 1e-6).
    eps_changed = []
    for name, mod in model.named_modules():
        if type(mod).__name__.endswith("RMSNorm") and hasattr(mod, "variance_epsilon"):
            if mod.variance_epsilon != c.eps:
                eps_changed.append(f"{name}: {mod.variance_epsilon} -> {c.eps}")
                mod.variance_epsilon = c.eps
        if isinstance(mod, torch.nn.LayerNorm) and "indexer" in name and mod.eps != 1e-6:
            eps_changed.append(f"{name} (LayerNorm): {mod.eps} -> 1e-06")
            mod.eps = 1e-6
    log(f"eps patch: {len(eps_changed)} changed, e.g. {eps_changed[:2]}")

    # RoPE inverse frequencies were computed at construction (float32 arithmetic): recompute them in
    # float64 through the model's own init function under the dtype-rewriting mode.
    rope_notes = []
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS
    for name, mod in model.named_modules():
        if hasattr(mod, "inv_freq") and hasattr(mod, "attention_scaling") and hasattr(mod, "rope_type"):
            old = mod.inv_freq.clone()
            if mod.rope_type == "default":
                fn = type(mod).compute_default_rope_parameters
            else:
                fn = ROPE_INIT_FUNCTIONS[mod.rope_type]
            with Fp64Mode() as m_:
                inv, att = fn(mod.config, None)
            inv = inv.to(torch.float64)
            mod.inv_freq = inv
            if hasattr(mod, "original_inv_freq"):
                mod.original_inv_freq = inv.clone()
            mod.attention_scaling = att
            rope_notes.append(f"{name} ({mod.rope_type}): inv_freq recomputed in float64 by {getattr(fn, '__name__', fn)} "
                              f"({sum(m_.rewrites.values())} float32 requests rewritten; max rel change "
                              f"{float(((inv - old.to(torch.float64)).abs() / inv.abs()).max()):.2e}), "
                              f"attention_scaling {att}")
    if not rope_notes:
        raise SystemExit("no rotary embedding module found to recompute inv_freq in float64")
    log("rope: " + "; ".join(rope_notes))
    return eps_changed, rope_notes


def parse_args():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gguf", required=True)
    ap.add_argument("--out")
    ap.add_argument("--label", default="")
    ap.add_argument("--tokens", type=int, default=48)
    ap.add_argument("--prompt-seed", type=int, default=1)
    ap.add_argument("--greedy", type=int, default=4)
    ap.add_argument("--synth-cmd", default="")
    ap.add_argument("--dry-run", action="store_true")
    ap.add_argument("--no-stock", action="store_true", help="skip the stock-float64 drop-point audit run")
    return ap.parse_args()


# ----------------------------------------------------------------------------------------------------
# Capture: module hooks record a forward's tensors in `cap`, (layer, name) -> float64 numpy array
# ----------------------------------------------------------------------------------------------------
def first(o):
    return o[0] if isinstance(o, (tuple, list)) else o


def make_store(cap, torch):
    def store(key, x):
        cap[key] = x.detach().to(torch.float64).cpu().numpy() if isinstance(x, torch.Tensor) else x
    return store


def install_hooks(model, layers, moe_layers, cap, cur, store, torch):
    """The hooks of every layer (hidden states, attention, MLP, indexer, router) and of the final norm;
    cur["indexer"] is the layer whose indexer is running (topk_capture reads it)."""
    hooks = []
    for l, layer in enumerate(layers):
        def pre(mod, args, kwargs, l=l):
            hs = args[0] if args else kwargs["hidden_states"]
            store((l, "input_hidden"), hs[0])
        hooks.append(layer.register_forward_pre_hook(pre, with_kwargs=True))
        hooks.append(layer.register_forward_hook(lambda m, i, o, l=l: store((l, "output_hidden"), first(o)[0])))
        hooks.append(layer.self_attn.register_forward_hook(lambda m, i, o, l=l: store((l, "attn_out"), first(o)[0])))
        hooks.append(layer.mlp.register_forward_hook(lambda m, i, o, l=l: store((l, "mlp_out"), first(o)[0])))
        idx = getattr(layer.self_attn, "indexer", None)
        if idx is not None:
            def ipre(mod, args, l=l):
                cur["indexer"] = l
            def ipost(mod, args, out, l=l):
                cur["indexer"] = None
                store((l, "hf_indexer_out"), first(out)[0] if isinstance(first(out), torch.Tensor) else None)
            hooks.append(idx.register_forward_pre_hook(ipre))
            hooks.append(idx.register_forward_hook(ipost))
        if l in moe_layers:
            gate = layer.mlp.gate

            def ghook(m, i, o, l=l):
                # logits recomputed from the gate's input in float64 (same op as HF's patched F.linear);
                # old-style routers return (indices, weights) themselves.
                x = i[0].reshape(-1, i[0].shape[-1]).to(torch.float64)
                store((l, "router_logits"), torch.nn.functional.linear(x, m.weight.to(torch.float64)))
                if isinstance(o, (tuple, list)):  # 5.17: (router_logits, topk_weights, topk_indices)
                    ints = [x for x in o if isinstance(x, torch.Tensor) and not x.is_floating_point()]
                    flts = [x for x in o if isinstance(x, torch.Tensor) and x.is_floating_point()
                            and ints and x.shape == ints[0].shape]
                    if ints and flts:
                        store((l, "hf_route_ids"), ints[0])
                        store((l, "hf_route_w"), flts[0])
            hooks.append(gate.register_forward_hook(ghook))
            mlp = layer.mlp
            if hasattr(mlp, "experts"):
                def epre(m, args, kwargs, l=l):
                    ts = [x for x in list(args) + list(kwargs.values()) if isinstance(x, torch.Tensor)]
                    ints = [x for x in ts if not x.is_floating_point()]
                    if ints and (l, "hf_route_ids") not in cap:
                        k_ = next(j for j, x in enumerate(ts) if x is ints[0])
                        store((l, "hf_route_ids"), ints[0])
                        if k_ + 1 < len(ts):
                            store((l, "hf_route_w"), ts[k_ + 1])
                hooks.append(mlp.experts.register_forward_pre_hook(epre, with_kwargs=True))
            if hasattr(mlp, "route_tokens_to_experts"):
                orig = mlp.route_tokens_to_experts

                def wrapped(*args, _orig=orig, _l=l, **kw):
                    r = _orig(*args, **kw)
                    store((_l, "hf_route_ids"), r[0])
                    store((_l, "hf_route_w"), r[1])
                    return r
                mlp.route_tokens_to_experts = wrapped
    hooks.append(model.model.norm.register_forward_hook(lambda m, i, o: store((-1, "final_norm"), first(o)[0])))

    return hooks


def make_run_forward(model, cap, cur, store, torch, Fp64Mode, DropAudit, stable_topk, orig_topk):
    """run_forward(ids, fp64): one forward of the model on ids with `cap` refilled and torch.topk swapped for
    the lower-index rule (recording the indexer's scores) while it runs; returns (float64 logits, the mode)."""
    def topk_capture(input, k, dim=-1, largest=True, sorted=True, *, out=None):
        if cur["indexer"] is not None and input.dim() in (3, 4):
            x = input.reshape(input.shape[-2], input.shape[-1]) if input.dim() == 4 else input[0]
            store((cur["indexer"], "indexer_scores_raw"), x)
        return stable_topk(input, k, dim=dim, largest=largest, sorted=sorted)

    def run_forward(id_list, fp64=True):
        cap.clear()
        torch.topk = topk_capture
        torch.Tensor.topk = lambda self, *a_, **k_: topk_capture(self, *a_, **k_)
        mode = Fp64Mode() if fp64 else DropAudit()
        try:
            with torch.no_grad(), mode:
                out = model(input_ids=torch.tensor([list(id_list)], dtype=torch.long), use_cache=False)
        finally:
            torch.topk = orig_topk
            del torch.Tensor.topk
        logits = out.logits[0].detach().to(torch.float64).numpy()
        store((-1, "logits"), out.logits[0])
        return logits, mode

    return run_forward


# ----------------------------------------------------------------------------------------------------
# Derived quantities with the reference's definitions
# ----------------------------------------------------------------------------------------------------
def indexer_derived(cap, c, l, T):
    raw = cap.get((l, "indexer_scores_raw"))
    if raw is None:
        return None
    s = np.array(raw, dtype=np.float64)[:, -T:] if raw.shape[1] >= T else np.array(raw)
    s = s.copy()
    tri = np.triu(np.ones((T, T), dtype=bool), 1)
    s[tri] = -np.inf
    k = c.topk
    topk = -np.ones((T, k), dtype=np.int32)
    tie = np.zeros(T, dtype=np.uint8)
    gap = np.full(T, np.nan)
    for r in range(T):
        order = np.argsort(-s[r, : r + 1], kind="stable")
        n = min(k, r + 1)
        sel = np.sort(order[:n])
        topk[r, :n] = sel
        if r + 1 > k:
            gap[r] = s[r, order[k - 1]] - s[r, order[k]]
            tie[r] = 1 if s[r, order[k - 1]] == s[r, order[k]] else 0
    return s, topk, tie, gap


def router_derived(cap, c, bias_of, l):
    lg = cap.get((l, "router_logits"))
    if lg is None:
        return None
    lg = np.array(lg, dtype=np.float64).reshape(-1, c.n_exp)
    prob = 1 / (1 + np.exp(-lg))
    choice = prob + bias_of[l][None, :]
    T = lg.shape[0]
    gap = np.full(T, np.inf)
    ggap = np.full(T, np.nan)
    ids_ref = np.zeros((T, c.n_used), dtype=np.int32)
    per = c.n_exp // c.groups
    for t in range(T):
        ch = choice[t].copy()
        if c.groups > 1:
            gs = np.array([np.sort(ch[g * per:(g + 1) * per])[::-1][:2].sum() for g in range(c.groups)])
            go = np.argsort(-gs, kind="stable")
            if c.groups_used < c.groups:
                ggap[t] = gs[go[c.groups_used - 1]] - gs[go[c.groups_used]]
            for g in go[c.groups_used:]:
                ch[g * per:(g + 1) * per] = -np.inf
        o = np.argsort(-ch, kind="stable")
        if c.n_used < c.n_exp:
            gap[t] = ch[o[c.n_used - 1]] - ch[o[c.n_used]]
        ids_ref[t] = np.sort(o[: c.n_used])
    hid = cap.get((l, "hf_route_ids"))
    hw = cap.get((l, "hf_route_w"))
    if hid is None:
        raise SystemExit(f"layer {l}: the router's choice was not captured (no route_tokens_to_experts)")
    hid = np.array(hid).reshape(T, -1).astype(np.int64)
    hw = np.array(hw, dtype=np.float64).reshape(T, -1)
    order = np.argsort(hid, axis=1, kind="stable")
    ids = np.take_along_axis(hid, order, 1).astype(np.int32)
    w = np.take_along_axis(hw, order, 1)
    return ids, w, gap, ggap, ids_ref


# ----------------------------------------------------------------------------------------------------
# Runs and the file
# ----------------------------------------------------------------------------------------------------
def write_prompt_case(f, case, ids, logits, cap, c, L, moe_layers, bias_of, comp, summary, log):
    """The prompt case: every layer's datasets, the indexer's and router's decisions, final norm and logits;
    its statistics in summary["prompt"]."""
    T = len(ids)
    g = f.create_group(case)
    g.attrs["moe"] = 0
    g.create_dataset("input_ids", data=ids)
    stats = {"sparse_rows": 0, "indexer_tie_rows": 0, "min_indexer_gap": None, "min_router_gap": None,
             "hf_topk_vs_lower_index_rows_diff": 0, "hf_router_vs_reference_rule_rows_diff": 0}
    for l in range(L):
        lg_ = g.create_group(f"layers/{l}")
        lg_.attrs["moe"] = int(l in moe_layers)
        lg_.attrs["indexer_full"] = int(c.idx_full[l])
        for n in ("input_hidden", "attn_out", "mlp_out", "output_hidden"):
            lg_.create_dataset(n, data=cap[(l, n)].astype(np.float32), **comp)
        d = indexer_derived(cap, c, l, T)
        if d is not None:
            s, topk, tie, gap = d
            lg_.create_dataset("indexer_scores", data=s.astype(np.float32), **comp)
            lg_.create_dataset("indexer_topk", data=topk)
            lg_.create_dataset("indexer_topk_tie", data=tie)
            lg_.create_dataset("indexer_topk_gap", data=gap)
            stats["sparse_rows"] += int(np.sum(np.arange(T) + 1 > c.topk))
            stats["indexer_tie_rows"] += int(tie.sum())
            fin = gap[np.isfinite(gap)]
            if fin.size:
                mg = float(fin.min())
                stats["min_indexer_gap"] = mg if stats["min_indexer_gap"] is None else min(mg, stats["min_indexer_gap"])
            hf_out = cap.get((l, "hf_indexer_out"))
            if hf_out is not None and np.issubdtype(np.asarray(hf_out).dtype, np.integer):  # HF's own selection, restricted to causal keys, as sets
                hf_out = np.array(hf_out).astype(np.int64)
                for r in range(T):
                    a_ = set(int(x) for x in hf_out[r] if x <= r)
                    b_ = set(int(x) for x in topk[r] if x >= 0)
                    if a_ != b_:
                        stats["hf_topk_vs_lower_index_rows_diff"] += 1
        elif c.idx_full[l]:
            log(f"WARNING: layer {l} is full but no indexer scores were captured")
        if l in moe_layers:
            ids_, w_, gap_, ggap_, ids_ref = router_derived(cap, c, bias_of, l)
            lg_.create_dataset("router_ids", data=ids_)
            lg_.create_dataset("router_weights", data=w_.astype(np.float32))
            lg_.create_dataset("router_topk_gap", data=gap_)
            if c.groups > 1:
                lg_.create_dataset("router_group_gap", data=ggap_)
            stats["hf_router_vs_reference_rule_rows_diff"] += int(np.sum(np.any(ids_ != ids_ref, axis=1)))
            mg = float(np.min(gap_))
            stats["min_router_gap"] = mg if stats["min_router_gap"] is None else min(mg, stats["min_router_gap"])
    g.create_dataset("final_norm", data=cap[(-1, "final_norm")].astype(np.float32), **comp)
    g.create_dataset("logits", data=logits.astype(np.float32), **comp)
    summary["prompt"] = stats
    log(f"{case}: {stats}")


def stock_audit(run_forward, ids, a, cap, patched_logits, patched_layer, summary, log):
    """The stock float64 run: where the stock code drops to float32, and what it costs."""
    try:
        if not a.no_stock:
            slogits, audit = run_forward(ids, fp64=False)
            nm = lambda x, y: float(np.sum((x - y) ** 2) / np.sum(y ** 2))
            worst = {}
            for k, v in patched_layer.items():
                if k in cap:
                    worst[k[1]] = max(worst.get(k[1], 0.0), nm(cap[k], v))
            summary["stock_fp64_vs_patched"] = {"logits_nmse": nm(slogits, patched_logits), "worst_layer_nmse": worst,
                                                "argmax_rows_diff": int(np.sum(np.argmax(slogits, 1) != np.argmax(patched_logits, 1)))}
            summary["stock_fp64_drop_points"] = {k: v for k, v in audit.sites.items()}
            summary["stock_fp64_low_precision_ops"] = dict(audit.low_ops)
            log(f"stock float64 vs patched: {summary['stock_fp64_vs_patched']}")
            for s_, n_ in audit.sites.items():
                log(f"  drop point {s_}  x{n_}")

    except Exception:
        log('stock run failed: ' + traceback.format_exc())


def greedy_case(f, run_forward, ids, a, c, L, moe_layers, cap, bias_of, comp, summary, log):
    """Greedy steps, a full recompute per step: tokens, margins and each step's decisions."""
    T = len(ids)
    try:
        if a.greedy > 0:
            all_ids = list(int(x) for x in ids)
            toks, margins, step_logits, s_topk, s_tie, s_gap, s_rid, s_rw, s_rgap = [], [], [], [], [], [], [], [], []
            idx_layers = [l for l in range(L) if c.idx_full[l]]
            for step in range(a.greedy):
                lg, _ = run_forward(all_ids, fp64=True)
                row = lg[-1]
                o = np.argsort(-row, kind="stable")
                tok = int(o[0])
                toks.append(tok)
                margins.append(float(row[o[0]] - row[o[1]]))
                step_logits.append(row)
                Tn = len(all_ids)
                kk, tt, gg = [], [], []
                for l in range(L):
                    src = l
                    while not c.idx_full[src]:
                        src -= 1
                    s, topk, tie, gap = indexer_derived(cap, c, src, Tn)
                    kk.append(topk[-1])
                    tt.append(tie[-1])
                    gg.append(gap[-1])
                s_topk.append(kk)
                s_tie.append(tt)
                s_gap.append(gg)
                ri, rw, rg = [], [], []
                for l in moe_layers:
                    ids_, w_, gap_, _, _ = router_derived(cap, c, bias_of, l)
                    ri.append(ids_[-1])
                    rw.append(w_[-1])
                    rg.append(gap_[-1])
                s_rid.append(ri)
                s_rw.append(rw)
                s_rgap.append(rg)
                all_ids.append(tok)
            gname = f"greedy{T}x{a.greedy}"
            gg_ = f.create_group(gname)
            gg_.create_dataset("input_ids", data=ids)
            gg_.create_dataset("tokens", data=np.array(toks, dtype=np.int32))
            gg_.create_dataset("margins", data=np.array(margins))
            gg_.create_dataset("all_ids", data=np.array(all_ids, dtype=np.int32))
            gg_.create_dataset("step_logits", data=np.array(step_logits, dtype=np.float32), **comp)
            gg_.create_dataset("step_indexer_topk", data=np.array(s_topk, dtype=np.int32))
            gg_.create_dataset("step_indexer_topk_tie", data=np.array(s_tie, dtype=np.uint8))
            gg_.create_dataset("step_indexer_topk_gap", data=np.array(s_gap))
            if moe_layers:
                gg_.create_dataset("step_router_ids", data=np.array(s_rid, dtype=np.int32))
                gg_.create_dataset("step_router_weights", data=np.array(s_rw, dtype=np.float32))
                gg_.create_dataset("step_router_topk_gap", data=np.array(s_rgap))
            summary["greedy"] = {"tokens": toks, "margins": margins}
            log(f"{gname}: tokens {toks} margins {[round(m, 5) for m in margins]}")

    except Exception:
        log('greedy failed: ' + traceback.format_exc())


def write_file_attrs(f, a, c, cfg, model, sha, types, summary, eps_changed, rope_notes, nan_filled, layout_notes, log_lines,
                     torch, transformers):
    """The file's attributes: the model, the versions of everything that ran, the patches, the schema, the log."""
    import h5py
    import platform
    f.attrs["config_json"] = json.dumps(cfg.to_dict(), indent=2, sort_keys=True, default=str)
    f.attrs["gguf_sha256"] = sha
    f.attrs["gguf_types_json"] = json.dumps(collections.Counter(types.values()))
    f.attrs["label"] = a.label
    f.attrs["synth_cmd"] = a.synth_cmd
    f.attrs["prompt"] = f"input_ids = numpy.random.RandomState({a.prompt_seed}).randint(0, {c.vocab}, {a.tokens})"
    f.attrs["transformers_version"] = transformers.__version__
    f.attrs["torch_version"] = str(torch.__version__)
    f.attrs["numpy_version"] = np.__version__
    f.attrs["h5py_version"] = h5py.__version__
    f.attrs["python_version"] = platform.python_version()
    f.attrs["model_class"] = type(model).__name__
    import inspect
    f.attrs["modeling_file"] = os.path.basename(inspect.getsourcefile(type(model)))
    f.attrs["modeling_file_sha256"] = sha256_file(inspect.getsourcefile(type(model)))
    f.attrs["dtype"] = "float64"
    f.attrs["attn_implementation"] = "eager"
    f.attrs["experts_implementation"] = str(getattr(model.config, "_experts_implementation", None))
    f.attrs["eps_patch_changed"] = json.dumps(eps_changed)
    f.attrs["rope_patch"] = json.dumps(rope_notes)
    f.attrs["nan_filled_params"] = json.dumps(nan_filled)
    f.attrs["layout_notes"] = json.dumps(layout_notes)
    f.attrs["fp64_patch"] = ("aten dispatch mode: every float32/float16/bfloat16 dtype argument rewritten to float64 "
                             "(see fp64_rewrite_sites / summary_json); rotary inv_freq recomputed in float64; "
                             "an audit of the patched forward counts ops with float32/16 outputs (must be none)")
    f.attrs["fp32_drop_points_json"] = json.dumps(summary.get("stock_fp64_drop_points", {}), indent=1)
    f.attrs["tie_rule"] = ("torch.topk and Tensor.topk replaced by torch.sort(stable=True, descending=True)[:k] while the "
                           "model runs: on equal scores the LOWER index wins (indexer, router groups, router)")
    f.attrs["schema"] = ("as ../shared/models/glm-dsa-tiny.oracle.h5: prompt group input_ids[T]; layers/{l}/{input_hidden,"
                         "attn_out,mlp_out,output_hidden}[T,E] f32; full indexer layers: indexer_scores[T,T] f32 (-inf above "
                         "the diagonal), indexer_topk[T,k] i32 ascending -1 padded, indexer_topk_tie[T] u8, indexer_topk_gap[T] "
                         "f64 (NaN when row has <= k keys); MoE layers: router_ids[T,K] ascending, router_weights[T,K] f32, "
                         "router_topk_gap[T] f64 (k-th minus (k+1)-th of sigmoid+bias after the group mask), router_group_gap "
                         "(n_group>1); final_norm[T,E], logits[T,V]. greedy group: full recompute per step.")
    f.attrs["summary_json"] = json.dumps(summary, indent=1, default=str)
    f.attrs["log"] = "\n".join(log_lines)


def main():
    a = parse_args()
    t0 = time.time()
    log_lines = []

    def log(s):
        s = f"[{time.time() - t0:7.1f}s] {s}"
        print(s, flush=True)
        log_lines.append(s)

    sha = sha256_file(a.gguf)
    meta, arch, tensors, types = load_gguf(a.gguf)
    c = Cfg(meta, arch, tensors)
    log(f"{a.gguf}: sha256 {sha}, arch {arch}, {len(tensors)} tensors, layers {c.n_layer}, E {c.E}, H {c.H}, "
        f"top_k {c.topk}, experts {c.n_exp}/{c.n_used} groups {c.groups}/{c.groups_used}, idx_full {c.idx_full}")
    sd_np = hf_state_dict(c, tensors)
    del tensors
    rng = np.random.RandomState(a.prompt_seed)
    ids = rng.randint(0, c.vocab, size=a.tokens).astype(np.int32)
    if a.dry_run:
        for k, v in list(sd_np.items())[:40]:
            print(k, v.shape)
        print(json.dumps(hf_config_kwargs(c), indent=1))
        print("ids", ids.tolist())
        return
    torch, Fp64Mode, DropAudit, stable_topk, orig_topk, counts = torch_side()
    import transformers
    torch.set_num_threads(max(1, os.cpu_count() or 1))
    model, cfg, nan_filled, layout_notes = build_model(c, sd_np, log)
    del sd_np

    eps_changed, rope_notes = patch_conventions(model, c, torch, Fp64Mode, log)

    layers = model.model.layers
    L = len(layers)
    moe_layers = [l for l in range(L) if l >= c.dense_lead]
    cap = {}
    cur = {"indexer": None}
    store = make_store(cap, torch)
    install_hooks(model, layers, moe_layers, cap, cur, store, torch)
    run_forward = make_run_forward(model, cap, cur, store, torch, Fp64Mode, DropAudit, stable_topk, orig_topk)
    bias_of = {l: layers[l].mlp.gate.e_score_correction_bias.detach().to(torch.float64).numpy() for l in moe_layers}

    # ---- runs ------------------------------------------------------------------------------------
    import h5py
    summary = {"label": a.label, "gguf_sha256": sha, "tokens": a.tokens}
    out_path = a.out
    tmp = out_path + ".tmp"
    f = h5py.File(tmp, "w")
    T = len(ids)
    case = f"prompt{T}"
    t1 = time.time()
    logits, mode = run_forward(ids, fp64=True)
    summary["forward_secs"] = round(time.time() - t1, 2)
    summary["fp64_dtype_audit"] = {"aten_ops": mode.ops, "low_precision_outputs": dict(mode.low_outputs),
                                   "dtype_rewrites": dict(mode.rewrites)}
    summary["fp64_rewrite_sites"] = {k: v for k, v in mode.sites.items()}
    summary["topk_calls"] = counts["topk"]
    log(f"fp64 forward {summary['forward_secs']} s; aten ops {mode.ops}; low-precision outputs {dict(mode.low_outputs)}; "
        f"rewrites {dict(mode.rewrites)}")
    for s_, n_ in mode.sites.items():
        log(f"  rewritten at {s_}  x{n_}")
    if not np.all(np.isfinite(logits)):
        log("ERROR: non-finite logits (a NaN-filled parameter was used?)")
        summary["error"] = "non-finite logits"
    comp = dict(compression="gzip", compression_opts=4, shuffle=True)
    write_prompt_case(f, case, ids, logits, cap, c, L, moe_layers, bias_of, comp, summary, log)
    patched_logits = logits
    patched_layer = {k: v for k, v in cap.items() if k[1] in ("attn_out", "mlp_out", "output_hidden")}
    stock_audit(run_forward, ids, a, cap, patched_logits, patched_layer, summary, log)
    greedy_case(f, run_forward, ids, a, c, L, moe_layers, cap, bias_of, comp, summary, log)
    write_file_attrs(f, a, c, cfg, model, sha, types, summary, eps_changed, rope_notes, nan_filled, layout_notes, log_lines,
                     torch, transformers)
    f.close()
    os.replace(tmp, out_path)
    log(f"wrote {out_path} ({os.path.getsize(out_path)} bytes)")
    print("SUMMARY " + json.dumps(summary, default=str))


if __name__ == "__main__":
    main()
