#!/usr/bin/python3
# suites/quant: dequantizes raw ggml blocks with PyPI gguf's numpy code (gguf.quants.dequantize), an
# implementation independent of mlaconf's, for the cross-check in test_dequant_gguf_py.cpp.
# Usage: gguf_py_dequant.py DIR NAME...   reads DIR/NAME.bin (raw blocks of the type NAME up to its first
# "."), writes DIR/NAME.f32. Exit 3 when gguf cannot be imported; a failure gets DIR/NAME.err.
import sys

try:
    import numpy as np
    from gguf import GGMLQuantizationType, quants
    from gguf.constants import GGML_QUANT_SIZES
except Exception as e:  # noqa: BLE001
    print(f"gguf not importable: {e}", file=sys.stderr)
    sys.exit(3)

out_dir = sys.argv[1]
for name in sys.argv[2:]:
    try:
        qtype = GGMLQuantizationType[name.split(".")[0]]
        block_size, type_size = GGML_QUANT_SIZES[qtype]
        raw = np.fromfile(f"{out_dir}/{name}.bin", dtype=np.uint8)
        rows = raw.reshape(-1, type_size * (256 // block_size if block_size < 256 else 1))
        values = quants.dequantize(rows, qtype).astype(np.float32, copy=False).reshape(-1)
        values.tofile(f"{out_dir}/{name}.f32")
    except Exception as e:  # noqa: BLE001
        with open(f"{out_dir}/{name}.err", "w") as f:
            f.write(f"{type(e).__name__}: {e}")
