#!/usr/bin/python3
"""TEMPLATE: answer one layer's sparse MLA of an mlaconf fixture with a FlashMLA-style sparse kernel.

    python3 flashmla_template.py golden.h5 answer.h5 [--layer 1]
    mlaconf compare golden.h5 answer.h5

Not run by mlaconf's tests (it needs a GPU and the kernel package); exit 3 when they are absent. Adapt
`kernel()` to your kernel; everything else is the package's job. The argument mapping, fixture ->
FlashMLA's `flash_mla_sparse_fwd(q, kv, indices, sm_scale, d_v)` (the sparse prefill entry point; vLLM
re-exports it from vllm.v1.attention.ops.flashmla):

  fixture dataset (layers/<l>/)     shape          kernel argument                    shape, dtype
  q_absorbed                        [T, H, 576]    q                                  [s_q=T, h_q=H, d_qk=576] bf16
  latent_cache                      [S, 576]       kv  (= latent_cache[:, None, :])   [s_kv=S, h_kv=1, d_qk=576] bf16
  indexer_topk                      [T, K]         indices (= topk[:, None, :])       [s_q, h_kv=1, topk=K] int32, -1 = no key
  (config) kv_lora_rank = 512                      d_v                                512
  (config) (qk_nope + qk_rope)^-1/2                sm_scale                           float
  attn_latent_out                   [T, H, 512]    output[0]                          [s_q, h_q, d_v] bf16

THE SCALE TRAP: sm_scale is (qk_nope + qk_rope)^-1/2 = 256^-1/2 on GLM-5 (192^-1/2 on DeepSeek V3.2),
the head dim of the un-absorbed query. It is NOT 576^-1/2 = q.shape[-1]^-1/2, the width of the absorbed
query, which FlashMLA's flash_mla_with_kvcache uses when softmax_scale is None. The fixture's `scale`
parameter is the right value (mlaconf_answer.softmax_scale; x mscale^2 under DeepSeek YaRN). With
576^-1/2 the answer fails on attn_latent_out (`numpy_sparse_mla.py --wrong-scale` shows it).

Shapes such kernels accept: h_q 64 or 128 (vLLM pads 64 to 128 for the prefill kernel), topk a multiple
of 64, d_qk 576, d_v 512: make such a fixture with the docs/ANSWER_KIT.md recipe (`mlaconf synth --n-head 64
--top-k 128 ...`). Decode cases (`capture --decode-steps N`) are the decode shape: T = 1, latent_cache =
the whole cache.
"""
import argparse
import sys

try:
    import mlaconf_answer as ma
except ImportError:  # run from a checkout without `pip install ./python`
    import os
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    import mlaconf_answer as ma


def load_kernel():
    """The kernel entry point, or None. Replace with your own backend's import."""
    for mod in ("flash_mla", "vllm.v1.attention.ops.flashmla"):
        try:
            m = __import__(mod, fromlist=["flash_mla_sparse_fwd"])
            return m.flash_mla_sparse_fwd
        except (ImportError, AttributeError):
            continue
    return None


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("fixture")
    ap.add_argument("answer")
    ap.add_argument("--layer", type=int, default=1)
    a = ap.parse_args()
    try:
        import torch
    except ImportError:
        print("flashmla_template.py: not supported: torch is not installed", file=sys.stderr)
        return 3
    flash_mla_sparse_fwd = load_kernel()
    if flash_mla_sparse_fwd is None or not torch.cuda.is_available():
        print("flashmla_template.py: not supported: needs a CUDA GPU and flash_mla (or vLLM) installed", file=sys.stderr)
        return 3

    ans = ma.Answer(a.fixture, backend="FlashMLA flash_mla_sparse_fwd", as_torch=True, device="cuda", dtype=torch.bfloat16)

    @ans.register("sparse_mla", layers=[a.layer])
    def kernel(q_absorbed, latent_cache, topk, scale, kv_lora):
        out, _max_logits, _lse = flash_mla_sparse_fwd(
            q_absorbed.contiguous(),                 # [T, H, 576] bf16
            latent_cache[:, None, :].contiguous(),   # [S, 1, 576] bf16
            topk[:, None, :].contiguous(),           # [T, 1, K] int32, -1 = no key
            scale,                                   # 256^-1/2 on GLM-5, NOT 576^-1/2
            kv_lora)                                 # d_v = 512
        return out                                   # [T, H, 512] bf16 -> the answer declares bf16

    n = ans.run().write(a.answer)
    print(f"flashmla_template.py: answered {n} dataset(s) of layer {a.layer} at {ans.declared_precision()} -> {a.answer}")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except ma.FixtureError as e:
        print(f"flashmla_template.py: error: {e}", file=sys.stderr)
        sys.exit(2)
