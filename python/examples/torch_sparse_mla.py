#!/usr/bin/python3
"""Answer one layer's sparse MLA of an mlaconf fixture with torch (gather + softmax), in bf16, f16 or f32.

    python3 torch_sparse_mla.py golden.h5 answer.h5 [--layer 1] [--dtype bf16|f16|f32] [--device cuda]
    mlaconf compare golden.h5 answer.h5             # judged at the precision of --dtype

The inputs arrive as torch tensors in --dtype (indices int32); the output is written in that dtype and
the answer declares that precision, so compare uses its bounds (docs/TOLERANCES.md). Scores and
softmax are accumulated in float32, as kernels do. Exit 3 when torch is not installed.
"""
import argparse
import sys

try:
    import mlaconf_answer as ma
except ImportError:  # run from a checkout without `pip install ./python`
    import os
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    import mlaconf_answer as ma


def sparse_mla(q_absorbed, latent_cache, topk, scale, kv_lora):
    """q_absorbed [T,H,576], latent_cache [S,576], topk [T,K] int32 (-1 = no key) -> [T,H,512], q's dtype."""
    import torch
    valid = topk >= 0                                                   # [T,K]
    kv = latent_cache[topk.clamp(min=0).long()].float()                 # [T,K,576]: gathered cache rows
    s = torch.einsum("thc,tkc->thk", q_absorbed.float(), kv) * scale    # [T,H,K]
    s = s.masked_fill(~valid[:, None, :], float("-inf"))
    p = torch.softmax(s, dim=-1)
    return torch.einsum("thk,tkl->thl", p, kv[..., :kv_lora]).to(q_absorbed.dtype)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("fixture")
    ap.add_argument("answer")
    ap.add_argument("--layer", type=int, default=1)
    ap.add_argument("--dtype", choices=["bf16", "f16", "f32"], default="bf16")
    ap.add_argument("--device", default=None, help="default: cuda when available, else cpu")
    ap.add_argument("--wrong-scale", action="store_true", help="wrong on purpose: 576^-1/2")
    a = ap.parse_args()
    try:
        import torch
    except ImportError:
        print("torch_sparse_mla.py: not supported: torch is not installed", file=sys.stderr)
        return 3
    dtype = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}[a.dtype]
    device = a.device or ("cuda" if torch.cuda.is_available() else "cpu")
    ans = ma.Answer(a.fixture, backend=f"torch example ({device}, {a.dtype})", as_torch=True, device=device, dtype=dtype)

    @ans.register("sparse_mla", layers=[a.layer])
    def answer(q_absorbed, latent_cache, topk, scale, kv_lora):
        return sparse_mla(q_absorbed, latent_cache, topk, q_absorbed.shape[-1] ** -0.5 if a.wrong_scale else scale, kv_lora)

    n = ans.run().write(a.answer)
    print(f"torch_sparse_mla.py: answered {n} dataset(s) of layer {a.layer} at {ans.declared_precision()} -> {a.answer}")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except ma.FixtureError as e:
        print(f"torch_sparse_mla.py: error: {e}", file=sys.stderr)
        sys.exit(2)
