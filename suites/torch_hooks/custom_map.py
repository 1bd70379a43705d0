"""TorchHooks on a module tree other than HF's: the GLM-MoE-DSA model wrapped as `net.*` (a user's own
tree), answered through a name map of the user's own (GLM_MOE_DSA's rows re-rooted) and `layers=`.
Also the negative control of a wrong map (attn_out read from the attention's INPUT): compare must fail
there. Run by ci/torch_check.sh custom: argv FIXTURE GGUF OUT_GOOD OUT_BAD."""
import contextlib
import dataclasses
import os
import sys

import torch

src = os.environ["MLACONF_SOURCE_DIR"]
sys.path.insert(0, os.path.join(src, "python"))
sys.path.insert(0, os.path.join(src, "tools", "hf_oracle"))
import make_oracle as mo  # noqa: E402
from mlaconf_answer import Fixture, GLM_MOE_DSA, Hook, TorchHooks  # noqa: E402

fixture, gguf, out_good, out_bad = sys.argv[1:5]
meta, arch, t, _ = mo.load_gguf(gguf)
c = mo.Cfg(meta, arch, t)
model, _, _, _ = mo.build_model(c, mo.hf_state_dict(c, t), lambda s: None)
_, Fp64Mode, _, stable_topk, orig_topk, _ = mo.torch_side()
mo.patch_conventions(model, c, torch, Fp64Mode, lambda s: None)


class Wrapper(torch.nn.Module):      # a tree of the user's own: the model lives under `net`
    def __init__(self, m):
        super().__init__()
        self.net = m

    def forward(self, ids):
        return self.net(input_ids=ids, use_cache=False)


w = Wrapper(model).eval()
my_map = [dataclasses.replace(h, module="net." + h.module) for h in GLM_MOE_DSA]
bad_map = [h if h.dataset != "layers/{l}/attn_out" else Hook(h.module, h.dataset, "kw:hidden_states") for h in my_map]
fx = Fixture(fixture)
case = fx.cases()[0]
ids = torch.tensor([fx.f[case]["input_ids"][...].tolist()], dtype=torch.long)
for name_map, out in ((my_map, out_good), (bad_map, out_bad)):
    torch.topk = stable_topk
    torch.Tensor.topk = lambda self, *a, **k: stable_topk(self, *a, **k)
    try:
        with TorchHooks(w, name_map=name_map, layers="net.model.layers") as h, torch.no_grad(), Fp64Mode():
            w(ids)
    finally:
        torch.topk = orig_topk
        del torch.Tensor.topk
    ans = h.answer(fx)
    print(out, ans.write(out), "datasets, precision", ans.precision, "missing", ans.missing)
