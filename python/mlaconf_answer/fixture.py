"""Reading an mlaconf fixture (fixtures/SCHEMA.md): its model config, cases, and the exact inputs of each op."""
import json
import math

import h5py
import numpy as np

from .ops import OPS
from .errors import FixtureError

SCHEMA_VERSION = 1


def softmax_scale(cfg):
    """The sparse MLA softmax scale of a model config (the fixture's model_config_json as a dict).

    (qk_nope + qk_rope)^-1/2, the head dim before absorption: 256^-1/2 on GLM-5 (192 + 64), 192^-1/2 on
    DeepSeek V3.2. NOT (kv_lora + qk_rope)^-1/2 = 576^-1/2, the width of the absorbed query, which kernels
    such as FlashMLA take as their default when no scale is passed. Under DeepSeek YaRN it is multiplied
    by mscale^2, mscale = 1 + rope_yarn_log_multiplier * ln(rope_scaling_factor).
    """
    scale = 1.0 / math.sqrt(cfg["key_length_mla"])
    if cfg.get("rope_scaling_factor", 0) > 1 and cfg.get("rope_yarn_log_multiplier", 0) > 0:
        m = 1.0 + cfg["rope_yarn_log_multiplier"] * math.log(cfg["rope_scaling_factor"])
        scale *= m * m
    return scale


class OpCall:
    """One call of one op: a case, a layer and the exact inputs, by parameter name.

    inputs: {"q_absorbed": array, "latent_cache": array, "topk": array, "scale": float, ...} (see ops.OPS);
    expected_shapes: {output dataset name: shape the answer must have}.
    """

    def __init__(self, op, case, layer, inputs, expected_shapes):
        self.op, self.case, self.layer, self.inputs, self.expected_shapes = op, case, layer, inputs, expected_shapes

    def __repr__(self):
        shapes = {k: tuple(v.shape) if hasattr(v, "shape") else v for k, v in self.inputs.items()}
        return f"OpCall({self.op!r}, case={self.case!r}, layer={self.layer}, inputs={shapes})"


class Fixture:
    """An mlaconf fixture opened read-only.

    >>> fx = Fixture("golden.h5")
    >>> for call in fx.calls("sparse_mla", layers=[1]):
    ...     out = my_kernel(**call.inputs)
    """

    def __init__(self, path):
        self.path = path
        try:
            self.f = h5py.File(path, "r")
        except OSError as e:
            raise FixtureError(f"{path}: cannot open as HDF5: {e}") from None
        attrs = self.f.attrs
        if "mlaconf_schema_version" not in attrs:
            raise FixtureError(f"{path}: not an mlaconf fixture (no mlaconf_schema_version attribute)")
        v = int(attrs["mlaconf_schema_version"])
        if v != SCHEMA_VERSION:
            raise FixtureError(f"{path}: fixture schema version {v}, this mlaconf_answer reads version {SCHEMA_VERSION}")
        if "model_config_json" not in attrs:
            raise FixtureError(f"{path}: no model_config_json attribute")
        self.config = json.loads(attrs["model_config_json"])
        self.scale = softmax_scale(self.config)

    def close(self):
        self.f.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def cases(self):
        """Case group names, in the file's `cases` order."""
        names = json.loads(self.f.attrs["cases"]) if "cases" in self.f.attrs else list(self.f)
        return [c for c in names if c in self.f]

    def case_attrs(self, case):
        return dict(self.f[case].attrs)

    def layers(self, case):
        """Layer numbers of a case that have a layers/<l> group, ascending."""
        g = self.f[case]
        return sorted(int(l) for l in g["layers"]) if "layers" in g else []

    def has_op(self, op, case, layer):
        spec = OPS[op]
        g = self.f[case]
        p = f"layers/{layer}/"
        return all((p + d) in g for d in spec.input_datasets)

    def calls(self, op, layers=None, cases=None, as_torch=False, device=None, dtype=None):
        """Yields an OpCall for every (case, layer) holding all of `op`'s input datasets.

        layers / cases: restrict to these (None: all). as_torch: inputs as torch tensors on `device`
        (floats converted to `dtype`, e.g. torch.bfloat16; indices stay int32). Without torch: numpy
        arrays, floats as stored (float32) or converted to `dtype` (e.g. np.float64).
        """
        if op not in OPS:
            raise FixtureError(f"unknown op {op!r}: this package answers {', '.join(sorted(OPS))}")
        spec = OPS[op]
        want_layers = None if layers is None else {int(l) for l in layers}
        found = set()
        for case in self.cases():
            if cases is not None and case not in cases:
                continue
            for l in self.layers(case):
                if want_layers is not None and l not in want_layers:
                    continue
                if not self.has_op(op, case, l):
                    continue
                found.add(l)
                yield self._call(spec, case, l, as_torch, device, dtype)
        if want_layers is not None and not want_layers <= found:
            missing = sorted(want_layers - found)
            raise FixtureError(f"{self.path}: no case holds the inputs of {op} ({', '.join(spec.input_datasets)}) for layer(s) "
                               f"{missing} (capture them with `mlaconf capture --op-layers ...`)")

    def _call(self, spec, case, layer, as_torch, device, dtype):
        g = self.f[case]
        lg = g[f"layers/{layer}"]
        pos0 = int(g.attrs.get("pos0", 0))
        inputs = {}
        for param, dset in spec.inputs.items():
            a = np.asarray(lg[dset][...])
            if a.dtype.kind == "f" and dtype is not None and not as_torch:
                a = a.astype(dtype)
            if a.dtype.kind == "i":
                a = a.astype(np.int32)
            inputs[param] = a
        scalars = {"scale": self.scale, "pos0": pos0, "top_k": int(self.config["indexer_top_k"]),
                   "kv_lora": int(self.config["kv_lora_rank"]), "qk_rope": int(self.config["qk_rope"])}
        if as_torch:
            import torch
            for k, a in inputs.items():
                t = torch.from_numpy(np.ascontiguousarray(a))
                if a.dtype.kind == "f" and dtype is not None:
                    t = t.to(dtype)
                inputs[k] = t.to(device) if device is not None else t
        for k in spec.scalars:
            inputs[k] = scalars[k]
        shapes = {}
        for out in spec.outputs:
            if out in lg:
                shapes[out] = tuple(lg[out].shape)
        return OpCall(spec.name, case, layer, inputs, shapes)
