"""An answer to a fixture: the user's functions for the ops they register, their outputs, and the minimal
answer file (kind `op_answer`, fixtures/SCHEMA.md) that `mlaconf compare FIXTURE ANSWER` judges."""
import inspect
import json
import os
import tempfile

import h5py
import numpy as np

from . import __version__
from .errors import FixtureError
from .fixture import Fixture
from .ops import OPS

# Precision names the judge knows (docs/TOLERANCES.md), from the least to the most precise.
PRECISIONS = ["fp8", "bf16", "f16", "f32", "f64"]

# bfloat16 has no HDF5 predefined type: a 16-bit HDF5 float type with bfloat16's bit fields
# (sign 15, exponent 7..14 with bias 127, mantissa 0..6). HDF5 (and so mlaconf and h5py) converts it to
# float32 exactly on read.
def _bf16_h5type():
    t = h5py.h5t.IEEE_F32LE.copy()
    t.set_fields(15, 7, 8, 0, 7)
    t.set_size(2)
    t.set_ebias(127)
    return t


class Stored:
    """An output ready to write: `data` (numpy) and its precision ('bf16' data is the uint16 bit pattern)."""

    def __init__(self, data, precision):
        self.data, self.precision = data, precision

    @property
    def shape(self):
        return tuple(self.data.shape)


def as_bfloat16(x):
    """A float array rounded to bfloat16 (round to nearest even), ready to return as an answer: for numpy
    code that emulates a bf16 kernel (numpy has no bfloat16; torch bfloat16 tensors need no wrapping)."""
    a = np.ascontiguousarray(np.asarray(x, dtype=np.float32))
    bits = a.view(np.uint32).astype(np.uint64)
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)
    rounded[np.isnan(a)] = 0x7FC0
    return Stored(rounded, "bf16")


def to_stored(x):
    """numpy array, torch tensor or ml_dtypes bfloat16 array -> Stored (no rounding: stored as given)."""
    if isinstance(x, Stored):
        return x
    if type(x).__module__.startswith("torch"):
        import torch
        x = x.detach()
        if x.dtype == torch.bfloat16:
            return Stored(x.cpu().contiguous().view(torch.int16).numpy().view(np.uint16), "bf16")
        x = x.cpu().numpy()
    a = np.asarray(x)
    if a.dtype.name == "bfloat16":  # ml_dtypes / jax numpy bfloat16
        return Stored(np.ascontiguousarray(a).view(np.uint16), "bf16")
    if a.dtype == np.float16:
        return Stored(a, "f16")
    if a.dtype == np.float32:
        return Stored(a, "f32")
    if a.dtype == np.float64:
        return Stored(a, "f64")
    if a.dtype.kind in "iu":
        return Stored(a.astype(np.int32), None)
    raise FixtureError(f"an answer of dtype {a.dtype}: want float16, bfloat16, float32, float64 or integer indices")


class Answer:
    """Collects answers to a fixture and writes them.

    >>> ans = Answer(Fixture("golden.h5"))           # or Answer("golden.h5", precision="bf16")
    >>> @ans.register("sparse_mla", layers=[1])
    ... def my_sparse_mla(q_absorbed, latent_cache, topk, scale, kv_lora): ...
    >>> ans.run().write("answer.h5")

    precision: what the judge holds the answer to (f64, f32, f16, bf16). None: the least precise dtype
    among the answered float arrays (float16 -> f16, torch/ml_dtypes bfloat16 -> bf16, float32 -> f32).
    """

    def __init__(self, fixture, precision=None, backend="python", as_torch=False, device=None, dtype=None):
        self.fx = fixture if isinstance(fixture, Fixture) else Fixture(fixture)
        if precision is not None and precision not in PRECISIONS:
            raise FixtureError(f"precision {precision!r}: want one of {', '.join(PRECISIONS)}")
        self.precision, self.backend = precision, backend
        self.as_torch, self.device, self.dtype = as_torch, device, dtype
        self.registered = []          # (op, function, layers, cases)
        self.results = {}             # case -> {"layers/<l>/<name>": Stored}

    def register(self, op, fn=None, layers=None, cases=None):
        """Registers fn for op (decorator when fn is None). fn receives the op's parameters it names."""
        if op not in OPS:
            raise FixtureError(f"unknown op {op!r}: this package answers {', '.join(sorted(OPS))}")

        def add(f):
            names = inspect.signature(f).parameters
            unknown = [p for p in names if p not in OPS[op].params()
                       and names[p].default is inspect.Parameter.empty
                       and names[p].kind not in (inspect.Parameter.VAR_KEYWORD, inspect.Parameter.VAR_POSITIONAL)]
            if unknown:
                raise FixtureError(f"{f.__name__} for {op}: parameter(s) {unknown} unknown; {op} passes {OPS[op].params()}")
            self.registered.append((op, f, layers, cases))
            return f

        return add if fn is None else add(fn)

    def run(self, progress=None):
        """Calls every registered function on every case and layer it applies to; returns self."""
        for op, f, layers, cases in self.registered:
            spec = OPS[op]
            sig = inspect.signature(f).parameters
            takes_all = any(p.kind == inspect.Parameter.VAR_KEYWORD for p in sig.values())
            n = 0
            for call in self.fx.calls(op, layers=layers, cases=cases, as_torch=self.as_torch, device=self.device, dtype=self.dtype):
                kw = call.inputs if takes_all else {k: v for k, v in call.inputs.items() if k in sig}
                out = f(**kw)
                self.add(call, out)
                n += 1
                if progress:
                    progress(f"{op} {call.case} layer {call.layer}")
            if n == 0:
                raise FixtureError(f"{self.fx.path}: no case holds the inputs of {op} ({', '.join(spec.input_datasets)})")
        return self

    def add(self, call, out):
        """Stores the output(s) of one OpCall (one array, a tuple in the op's output order, or a dict)."""
        spec = OPS[call.op]
        if isinstance(out, dict):
            named = out
        elif isinstance(out, (tuple, list)):
            if len(out) != len(spec.outputs):
                raise FixtureError(f"{call.op} returned {len(out)} values; it answers {spec.outputs}")
            named = dict(zip(spec.outputs, out))
        else:
            if len(spec.outputs) != 1:
                raise FixtureError(f"{call.op} answers {spec.outputs}: return a tuple or a dict")
            named = {spec.outputs[0]: out}
        for name, x in named.items():
            if name not in spec.outputs:
                raise FixtureError(f"{call.op} returned {name!r}; it answers {spec.outputs}")
            if name not in call.expected_shapes:
                raise FixtureError(f"{self.fx.path}: case {call.case} layer {call.layer} holds no expected {name} to judge an answer against")
            s = to_stored(x)
            if s.shape != call.expected_shapes[name]:
                raise FixtureError(f"{call.op} case {call.case} layer {call.layer}: {name} has shape {list(s.shape)}, "
                                   f"the fixture's is {list(call.expected_shapes[name])}")
            self.results.setdefault(call.case, {})[f"layers/{call.layer}/{name}"] = s

    def declared_precision(self):
        if self.precision is not None:
            return self.precision
        seen = [s.precision for c in self.results.values() for s in c.values() if s.precision]
        return min(seen, key=PRECISIONS.index) if seen else "f32"

    def write(self, path):
        """Writes the answer file atomically (temporary name, fsync, rename); returns the datasets written."""
        if not self.results:
            raise FixtureError("nothing to write: no op was answered (register a function and run())")
        if os.path.abspath(path) == os.path.abspath(self.fx.path):
            raise FixtureError(f"{path}: the answer would overwrite the fixture")
        precision = self.declared_precision()
        src = self.fx.f
        n = 0

        def fill(out):
            nonlocal n
            for key in src.attrs:
                if key in ("mlaconf_schema_version", "model_config_json") or key.startswith("gguf_"):
                    out.attrs[key] = src.attrs[key]
            out.attrs["producer"] = "mlaconf_answer"
            out.attrs["producer_version"] = __version__
            out.attrs["precision"] = precision
            out.attrs["backend"] = self.backend
            out.attrs["cases"] = json.dumps(list(self.results))
            for case, datasets in self.results.items():
                g = out.create_group(case)
                g["input_ids"] = np.asarray(src[case]["input_ids"][...], dtype=np.int32)
                for rel, s in sorted(datasets.items()):
                    _write_dataset(g, rel, s)
                    n += 1
                g.attrs["kind"] = "op_answer"
                g.attrs["case_name"] = case
                g.attrs["precision"] = precision
                g.attrs["backend"] = self.backend
                g.attrs["pos0"] = int(src[case].attrs.get("pos0", 0))
                g.attrs["answers"] = json.dumps(sorted(datasets))

        write_h5_atomically(path, fill)
        return n


def write_h5_atomically(path, fill):
    """Writes an HDF5 file at `path` through fill(h5py.File): in the file's folder under an unpredictable
    temporary name created with O_EXCL (a link planted at a predictable name would be followed), cut to
    fit NAME_MAX for any legal name; fsync'ed and renamed into place; removed on any failure."""
    base = os.path.basename(path)
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(os.path.abspath(path)), prefix=base[: 255 - 5 - 8] + ".tmp.")
    os.close(fd)
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, 0o666 & ~umask)  # mkstemp's 0600 would become the file's mode
    try:
        with h5py.File(tmp, "w") as out:
            fill(out)
        fd = os.open(tmp, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise


def _write_dataset(group, rel, s):
    if s.precision == "bf16":
        parent = group.require_group(os.path.dirname(rel))
        t = _bf16_h5type()
        space = h5py.h5s.create_simple(s.data.shape)
        ds = h5py.h5d.create(parent.id, os.path.basename(rel).encode(), t, space)
        ds.write(h5py.h5s.ALL, h5py.h5s.ALL, np.ascontiguousarray(s.data), mtype=t)
    else:
        group[rel] = s.data
