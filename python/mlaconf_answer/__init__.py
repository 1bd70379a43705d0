"""mlaconf_answer: answer an mlaconf fixture with your own implementation of an op, and have
`mlaconf compare` judge it.

    import mlaconf_answer as ma
    ans = ma.Answer("golden.h5")
    @ans.register("sparse_mla", layers=[1])
    def sparse_mla(q_absorbed, latent_cache, topk, scale, kv_lora):
        ...                                   # your kernel; return attn_latent_out [T, H, kv_lora]
    ans.run().write("answer.h5")              # then: mlaconf compare golden.h5 answer.h5

Whole torch models (a HF transformers GlmMoeDsaForCausalLM, or any module tree with a name map):
mlaconf_answer.torch_hooks (TorchHooks, GLM_MOE_DSA) answers a forward case through module hooks.

Ops and their parameters: mlaconf_answer.ops (sparse_mla, indexer). numpy and h5py only; torch when
asked (Answer(..., as_torch=True, device="cuda", dtype=torch.bfloat16)).
"""
__version__ = "0.1.0"

from .errors import FixtureError  # noqa: E402
from .fixture import Fixture, OpCall, softmax_scale  # noqa: E402
from .ops import OPS  # noqa: E402
from . import ops as reference  # noqa: E402  (the plain numpy version of each op)
from .answer import Answer, PRECISIONS, as_bfloat16  # noqa: E402


def __getattr__(name):
    # torch_hooks on first use (PEP 562), so that `python -m mlaconf_answer.torch_hooks` runs it only once
    if name in ("DEEPSEEK_V32", "GLM_MOE_DSA", "Hook", "TorchHooks"):
        from . import torch_hooks
        return getattr(torch_hooks, name)
    raise AttributeError(f"module 'mlaconf_answer' has no attribute {name!r}")


__all__ = ["Answer", "as_bfloat16", "Fixture", "FixtureError", "DEEPSEEK_V32", "GLM_MOE_DSA", "Hook", "OpCall", "OPS", "PRECISIONS",
           "reference", "softmax_scale", "TorchHooks"]
