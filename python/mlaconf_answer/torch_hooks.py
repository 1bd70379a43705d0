"""Torch module hooks: answer a fixture's forward case with a whole torch model (issue 36, item 5).

An mlaconf capture of a model on some token ids (a `full_forward` case) holds per layer `input_hidden`,
`attn_out`, `mlp_out`, `output_hidden`, the decisions `indexer_topk` / `router_ids` / `router_weights`,
and `final_norm` / `logits`. Forward hooks on your torch model record the same tensors while it runs the
fixture's token ids; `answer()` turns them into a `full_forward` case of the fixture's own name
(fixtures/SCHEMA.md), and `mlaconf compare FIXTURE ANSWER` judges it, decision-aware: the model took its
own decisions (the attribute `forced_decisions` is 0), so rows downstream of a differing top-k or router
choice are attributed, not failed.

    from mlaconf_answer.torch_hooks import TorchHooks, GLM_MOE_DSA
    fx = Fixture("f.h5"); ids = fx.input_ids()                    # or numpy / h5py
    with TorchHooks(model, name_map=GLM_MOE_DSA) as h:
        model(input_ids=torch.tensor([ids]))
    h.answer(fx).write("answer.h5")                                # then: mlaconf compare f.h5 answer.h5

The name map is one table (a list of `Hook` rows): a module path (with `{l}` for the layer number, expanded
over `layers`), the dataset it fills, and how to read the tensor from the hook (`read`):

    "out"        the module's output          "out[i]"      element i of a tuple output
    "in[i]"      positional input i           "kw:NAME"     keyword input NAME, else positional input 0

A leading batch dimension of 1 is dropped; a tensor whose element count equals the fixture dataset's is
reshaped to its shape ([B*T, U] router outputs -> [T, U]). Two datasets are normalized to the schema's
conventions (SCHEMA.md), not judged raw:
  * `indexer_topk`: per row, the keys at or before the query (pos0 + row) in ascending order, -1 padded to
    the fixture's width K. Rows with fewer than K causal keys select all of them; HF's top-k over a
    masked row also returns masked (future) keys, which never enter attention. A key after the query
    selected on a row with more than K causal keys still shows: that row then has fewer than K keys.
  * `router_ids` / `router_weights`: sorted by expert id (the weights in the same order).
A mapped module the model does not have is listed (`TorchAnswer.missing`, the answer's root attribute
`hooks_missing`, where the fixture holds its dataset), never guessed; fixture datasets of the model level
that no hook filled are in `not_answered()` (and compare lists them as not judged).
Users of other module trees pass their own table (same `Hook` rows) and, when the layer container is
elsewhere, `layers=` (the dotted path of the ModuleList).

The precision the answer is judged at is the least precise floating dtype captured (float32 -> f32,
float64 -> f64, bfloat16 -> bf16, float16 -> f16), or the `precision=` given to answer().

CLI (a GGUF model through tools/hf_oracle/make_oracle.py's builder, or a HF model directory):
    python -m mlaconf_answer.torch_hooks --fixture F.h5 --gguf M.gguf --dtype f64 --out A.h5
    python -m mlaconf_answer.torch_hooks --fixture F.h5 --hf-model-dir D --dtype f32 --out A.h5
"""
import argparse
import json
import os
import sys
import time
from dataclasses import dataclass

import h5py
import numpy as np

from . import __version__
from .answer import PRECISIONS, _write_dataset, to_stored, write_h5_atomically
from .errors import FixtureError
from .fixture import Fixture


@dataclass(frozen=True)
class Hook:
    module: str      # dotted module path; "{l}" is each layer number
    dataset: str     # fixture dataset path; "{l}" likewise (e.g. "layers/{l}/attn_out", "logits")
    read: str = "out"  # out | out[i] | in[i] | kw:NAME
    note: str = ""


# HF transformers GlmMoeDsaForCausalLM (transformers 5.17).
GLM_MOE_DSA = [
    Hook("model.layers.{l}", "layers/{l}/input_hidden", "kw:hidden_states", "decoder layer input (residual stream)"),
    Hook("model.layers.{l}.self_attn", "layers/{l}/attn_out", "out[0]", "attention output after o_proj"),
    Hook("model.layers.{l}.mlp", "layers/{l}/mlp_out", "out", "dense MLP, or routed + shared experts"),
    Hook("model.layers.{l}", "layers/{l}/output_hidden", "out[0]", "decoder layer output"),
    Hook("model.layers.{l}.self_attn", "layers/{l}/indexer_topk", "out[2]",
         "the top-k key ids [B, T, K] attention used (the layer's indexer, or a shared layer's borrowed ones)"),
    Hook("model.layers.{l}.mlp.gate", "layers/{l}/router_weights", "out[1]", "GlmMoeDsaTopkRouter: (logits, weights, ids)"),
    Hook("model.layers.{l}.mlp.gate", "layers/{l}/router_ids", "out[2]", ""),
    Hook("model.norm", "final_norm", "out", "final RMSNorm"),
    Hook("lm_head", "logits", "out", ""),
]

# HF transformers DeepseekV32ForCausalLM (transformers 5.17): the same tree, but its decoder layer returns a
# tensor and its attention no top-k (the indexer's own output is read instead).
DEEPSEEK_V32 = [h for h in GLM_MOE_DSA if h.dataset not in ("layers/{l}/output_hidden", "layers/{l}/indexer_topk")] + [
    Hook("model.layers.{l}", "layers/{l}/output_hidden", "out", "decoder layer output"),
    Hook("model.layers.{l}.self_attn.indexer", "layers/{l}/indexer_topk", "out", "the indexer's top-k key ids [B, T, K]"),
]

NAME_MAPS = {"GlmMoeDsaForCausalLM": GLM_MOE_DSA, "DeepseekV32ForCausalLM": DEEPSEEK_V32}

_FLOAT_PRECISION = {"float64": "f64", "float32": "f32", "float16": "f16", "bfloat16": "bf16"}


def _first_batch(x):
    return x[0] if hasattr(x, "dim") and x.dim() >= 2 and x.shape[0] == 1 else x


def _pick(spec, args, kwargs, out):
    """The tensor a `read` spec names from a hook's (args, kwargs, output); None when absent."""
    if spec == "out":
        return out
    if spec.startswith("out[") and spec.endswith("]"):
        i = int(spec[4:-1])
        return out[i] if isinstance(out, (tuple, list)) and len(out) > i else None
    if spec.startswith("in[") and spec.endswith("]"):
        i = int(spec[3:-1])
        return args[i] if len(args) > i else None
    if spec.startswith("kw:"):
        name = spec[3:]
        if name in kwargs:
            return kwargs[name]
        return args[0] if args else None
    raise FixtureError(f"name map: read {spec!r}: want out, out[i], in[i] or kw:NAME")


class TorchHooks:
    """Forward hooks on `model` after `name_map` (list of Hook). Records the last call of every mapped
    module (detached, on the CPU, dtype kept). Use as a context manager (hooks removed on exit) or call
    remove() yourself.

    layers: dotted path of the layer ModuleList whose indices fill `{l}` (default: the first of
    model.layers / model.model.layers / transformer.h that exists)."""

    def __init__(self, model, name_map=GLM_MOE_DSA, layers=None):
        self.model, self.name_map = model, list(name_map)
        self.captured = {}           # dataset path -> torch tensor
        self.missing = []            # "module path (dataset)" the model does not have
        self.hooks = []
        mods = dict(model.named_modules())
        n_layers = self._n_layers(mods, layers)
        for h in self.name_map:
            paths = [(h.module.format(l=l), h.dataset.format(l=l)) for l in range(n_layers)] if "{l}" in h.module else [(h.module, h.dataset)]
            for mpath, dset in paths:
                m = mods.get(mpath)
                if m is None:
                    self.missing.append((mpath, dset))
                    continue
                self.hooks.append(m.register_forward_hook(self._recorder(dset, h.read), with_kwargs=True))

    @staticmethod
    def _n_layers(mods, layers):
        cands = [layers] if layers else ["model.layers", "model.model.layers", "layers", "transformer.h"]
        for c in cands:
            if c in mods:
                return len(mods[c])
        if layers:
            raise FixtureError(f"layers={layers!r}: the model has no such module")
        return 0

    def _recorder(self, dset, spec):
        def hook(mod, args, kwargs, out):
            x = _pick(spec, args, kwargs, out)
            if x is not None and hasattr(x, "detach"):
                self.captured[dset] = x.detach().cpu()
        return hook

    def remove(self):
        for h in self.hooks:
            h.remove()
        self.hooks = []

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.remove()

    def answer(self, fixture, case=None, precision=None, backend=None):
        """The recorded tensors as a TorchAnswer to `case` of `fixture` (default: its only forward case)."""
        fx = fixture if isinstance(fixture, Fixture) else Fixture(fixture)
        case = case or forward_case(fx)
        g = fx.f[case]
        pos0 = int(g.attrs.get("pos0", 0))
        datasets, skipped = {}, []
        for dset, t in sorted(self.captured.items()):
            if dset not in g:
                skipped.append(dset)
                continue
            want = tuple(g[dset].shape)
            x = _first_batch(t)
            if tuple(x.shape) != want:
                if x.numel() == int(np.prod(want)) and dset.split("/")[-1] != "indexer_topk":
                    x = x.reshape(want)
                elif dset.split("/")[-1] != "indexer_topk":
                    raise FixtureError(f"{dset}: the module gave shape {list(t.shape)}, the fixture's is {list(want)}")
            datasets[dset] = x
        for dset in [d for d in datasets if d.endswith("/indexer_topk")]:
            datasets[dset] = causal_topk(datasets[dset], g[dset].shape, pos0)
        for dset in [d for d in datasets if d.endswith("/router_ids")]:
            wpath = dset[: -len("router_ids")] + "router_weights"
            ids, w = sort_by_ids(datasets[dset], datasets.get(wpath))
            datasets[dset] = ids
            if w is not None:
                datasets[wpath] = w
        # A mapped module the model lacks matters only where the fixture holds its dataset (a dense layer
        # has no router).
        missing = [f"{m} ({d})" for m, d in self.missing if d in g]
        return TorchAnswer(fx, case, datasets, precision=precision, missing=missing, skipped=skipped,
                           backend=backend or f"torch {type(self.model).__name__}")


def forward_case(fx):
    cases = [c for c in fx.cases() if fx.f[c].attrs.get("kind", "full_forward") in ("full_forward", b"full_forward")]
    if len(cases) != 1:
        raise FixtureError(f"{fx.path}: {len(cases)} full_forward cases ({cases}); name one with case=")
    return cases[0]


def causal_topk(x, shape, pos0):
    """[T, K'] key ids (any order, any K') -> [T, K] int32: causal keys ascending, -1 padded (SCHEMA.md)."""
    a = np.asarray(x.numpy() if hasattr(x, "numpy") else x).reshape(shape[0], -1).astype(np.int64)
    T, K = shape
    out = -np.ones((T, K), dtype=np.int32)
    for r in range(T):
        keep = np.unique(a[r][(a[r] >= 0) & (a[r] <= pos0 + r)])[:K]
        out[r, : len(keep)] = keep
    return out


def sort_by_ids(ids, w):
    ids_np = np.asarray(ids.numpy() if hasattr(ids, "numpy") else ids).astype(np.int64)
    order = np.argsort(ids_np, axis=-1, kind="stable")
    ids_s = np.take_along_axis(ids_np, order, -1).astype(np.int32)
    if w is None:
        return ids_s, None
    import torch
    return ids_s, torch.take_along_dim(w, torch.from_numpy(order), dim=-1)


class TorchAnswer:
    """A `full_forward` case answering `case` of a fixture, ready to write (fixtures/SCHEMA.md)."""

    def __init__(self, fx, case, datasets, precision=None, missing=(), skipped=(), backend="torch"):
        self.fx, self.case, self.backend = fx, case, backend
        self.stored = {k: to_stored(v) for k, v in datasets.items()}
        self.missing, self.skipped = list(missing), list(skipped)
        seen = [s.precision for s in self.stored.values() if s.precision]
        if precision is not None and precision not in PRECISIONS:
            raise FixtureError(f"precision {precision!r}: want one of {', '.join(PRECISIONS)}")
        self.precision = precision or (min(seen, key=PRECISIONS.index) if seen else "f32")

    def not_answered(self):
        """Fixture datasets of the case's model level that the answer does not hold."""
        g = self.fx.f[self.case]
        names = ["final_norm", "logits"] + [f"layers/{l}/{n}" for l in self.fx.layers(self.case)
                                            for n in ("input_hidden", "attn_out", "mlp_out", "output_hidden",
                                                      "indexer_topk", "router_ids", "router_weights")]
        return [n for n in names if n in g and n not in self.stored]

    def write(self, path):
        """Writes the answer atomically; returns the number of datasets. Raises when a dataset the
        full_forward kind requires (the four per layer, the head) was not captured."""
        src, g = self.fx.f, self.fx.f[self.case]
        layers = sorted({int(k.split("/")[1]) for k in self.stored if k.startswith("layers/")})
        need = [f"layers/{l}/{n}" for l in layers for n in ("input_hidden", "attn_out", "mlp_out", "output_hidden")]
        has_head = "final_norm" in self.stored and "logits" in self.stored
        lacking = [n for n in need if n not in self.stored]
        if lacking or not layers:
            raise FixtureError(f"the hooks did not capture {lacking or 'any layer'} (hooks missing: {self.missing})")
        if os.path.abspath(path) == os.path.abspath(self.fx.path):
            raise FixtureError(f"{path}: the answer would overwrite the fixture")

        def fill(out):
            for key in src.attrs:
                if key in ("mlaconf_schema_version", "model_config_json") or key.startswith("gguf_"):
                    out.attrs[key] = src.attrs[key]
            out.attrs["producer"] = "mlaconf_answer.torch_hooks"
            out.attrs["producer_version"] = __version__
            out.attrs["precision"] = self.precision
            out.attrs["backend"] = self.backend
            out.attrs["cases"] = json.dumps([self.case])
            out.attrs["hooks_missing"] = json.dumps(self.missing)
            out.attrs["not_answered"] = json.dumps(self.not_answered())
            c = out.create_group(self.case)
            c["input_ids"] = np.asarray(g["input_ids"][...], dtype=np.int32)
            for rel, s in sorted(self.stored.items()):
                _write_dataset(c, rel, s)
            for l in layers:
                c[f"layers/{l}"].attrs["moe"] = int(g[f"layers/{l}"].attrs.get("moe", 0)) if f"layers/{l}" in g else 0
            c.attrs["kind"] = "full_forward"
            c.attrs["case_name"] = self.case
            c.attrs["precision"] = self.precision
            c.attrs["backend"] = self.backend
            c.attrs["hidden_source"] = "torch: real forward pass from the token ids"
            c.attrs["captured_layers"] = json.dumps(layers)
            c.attrs["pos0"] = int(g.attrs.get("pos0", 0))
            c.attrs["n_tokens"] = int(g["input_ids"].shape[0])
            c.attrs["has_head"] = int(has_head)
            c.attrs["forced_decisions"] = 0

        write_h5_atomically(path, fill)
        return len(self.stored)


# ------------------------------------------------------------------------------------------------------
# CLI: build the model (from a GGUF through tools/hf_oracle/make_oracle.py, or a HF directory), run the
# fixture's ids under the oracle's conventions, write the answer.
# ------------------------------------------------------------------------------------------------------
def _make_oracle_module(path=None):
    """Imports tools/hf_oracle/make_oracle.py (the GGUF -> HF state dict loader and the conventions)."""
    cands = [path] if path else []
    if os.environ.get("MLACONF_SOURCE_DIR"):
        cands.append(os.path.join(os.environ["MLACONF_SOURCE_DIR"], "tools", "hf_oracle", "make_oracle.py"))
    here = os.path.dirname(os.path.abspath(__file__))
    cands.append(os.path.join(here, "..", "..", "tools", "hf_oracle", "make_oracle.py"))
    for p in cands:
        if p and os.path.isfile(p):
            import importlib.util
            spec = importlib.util.spec_from_file_location("make_oracle", p)
            mod = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(mod)
            return mod
    raise FixtureError("tools/hf_oracle/make_oracle.py not found: pass --make-oracle PATH or set MLACONF_SOURCE_DIR "
                       "to an mlaconf checkout")


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m mlaconf_answer.torch_hooks",
                                 description="Answer a fixture's forward case with HF transformers' model, through module hooks")
    ap.add_argument("--fixture", required=True, help="mlaconf capture (full_forward case) of the same model")
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--gguf", help="GGUF model: weights dequantized by gguf-py (tools/hf_oracle/make_oracle.py)")
    src.add_argument("--hf-model-dir", help="a HF model directory (from_pretrained)")
    ap.add_argument("--dtype", choices=["f32", "f64"], default="f64")
    ap.add_argument("--case", help="the fixture case to answer (default: its only full_forward case)")
    ap.add_argument("--out", required=True)
    ap.add_argument("--make-oracle", help="path of tools/hf_oracle/make_oracle.py (default: found from the checkout)")
    ap.add_argument("--stock", action="store_true", help="no conventions (eps, RoPE, top-k ties, float64 dispatch mode): HF as shipped")
    ap.add_argument("--threads", type=int, default=0)
    a = ap.parse_args(argv)
    t0 = time.time()

    def log(s):
        print(f"[{time.time() - t0:6.1f}s] {s}", file=sys.stderr, flush=True)

    try:
        import torch
        import transformers
    except ImportError as e:
        print(f"mlaconf_answer.torch_hooks: not supported: torch/transformers not installed ({e})", file=sys.stderr)
        return 3
    if a.threads > 0:
        torch.set_num_threads(a.threads)
    fx = Fixture(a.fixture)
    case = a.case or forward_case(fx)
    ids = [int(x) for x in fx.f[case]["input_ids"][...]]
    if int(fx.f[case].attrs.get("pos0", 0)) != 0:
        raise FixtureError(f"{a.fixture}: case {case} starts at pos0 > 0; the hooks answer a prefill from an empty cache")
    mo = _make_oracle_module(a.make_oracle)
    torch_, Fp64Mode, _, stable_topk, orig_topk, _ = mo.torch_side()
    if a.gguf:
        meta, arch, tensors, _ = mo.load_gguf(a.gguf)
        c = mo.Cfg(meta, arch, tensors)
        sd = mo.hf_state_dict(c, tensors)
        del tensors
        model, _, _, _ = mo.build_model(c, sd, log)
        eps = c.eps
    else:
        from transformers import AutoModelForCausalLM
        kw = dict(attn_implementation="eager", dtype=torch.float64)
        try:
            model = AutoModelForCausalLM.from_pretrained(a.hf_model_dir, experts_implementation="eager", **kw)
        except (TypeError, ValueError) as e:
            log(f"from_pretrained(experts_implementation=...) refused ({e!r}); without it")
            model = AutoModelForCausalLM.from_pretrained(a.hf_model_dir, **kw)
        c = type("C", (), {"eps": float(model.config.rms_norm_eps)})()
        eps = c.eps
    if not a.stock:
        mo.patch_conventions(model, c, torch, Fp64Mode, log)
    dt = torch.float64 if a.dtype == "f64" else torch.float32
    model = model.to(dt).eval()
    if not a.stock:
        for mod in model.modules():   # .to() left the recomputed inv_freq as computed (float64)
            if hasattr(mod, "inv_freq") and mod.inv_freq.dtype != torch.float64:
                mod.inv_freq = mod.inv_freq.to(torch.float64)
    torch.set_default_dtype(dt)
    log(f"model {type(model).__name__} in {dt}, transformers {transformers.__version__}, torch {torch.__version__}, rms eps {eps}")
    name_map = NAME_MAPS.get(type(model).__name__)
    if name_map is None:
        raise FixtureError(f"no name map for {type(model).__name__} (known: {', '.join(NAME_MAPS)})")
    with TorchHooks(model, name_map=name_map) as h:
        if not a.stock:
            torch.topk = stable_topk
            torch.Tensor.topk = lambda self, *a_, **k_: stable_topk(self, *a_, **k_)
        try:
            from contextlib import nullcontext
            mode = Fp64Mode() if (a.dtype == "f64" and not a.stock) else nullcontext()
            t1 = time.time()
            with torch.no_grad(), mode:
                model(input_ids=torch.tensor([ids], dtype=torch.long), use_cache=False)
            log(f"forward of {len(ids)} tokens: {time.time() - t1:.2f} s")
        finally:
            if not a.stock:
                torch.topk = orig_topk
                del torch.Tensor.topk
    ans = h.answer(fx, case=case, backend=f"transformers {transformers.__version__} {type(model).__name__} {a.dtype}"
                   + (" stock" if a.stock else " (oracle conventions)"))
    n = ans.write(a.out)
    log(f"{a.out}: {n} datasets, precision {ans.precision}; hooks missing {ans.missing}; not answered {ans.not_answered()}")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except FixtureError as e:
        print(f"mlaconf_answer.torch_hooks: error: {e}", file=sys.stderr)
        sys.exit(2)
