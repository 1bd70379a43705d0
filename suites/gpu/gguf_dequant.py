#!/usr/bin/env python3
"""Independent cross-check for suites/gpu: dequantizes raw ggml blocks with gguf-py (llama.cpp's numpy code).
usage: gguf_dequant.py TYPE_NAME IN_BLOCKS OUT_F32"""
import sys
import numpy as np
from gguf import GGMLQuantizationType, quants

name, src, dst = sys.argv[1:4]
qt = GGMLQuantizationType[name]
raw = np.fromfile(src, dtype=np.uint8)
out = quants.dequantize(raw, qt).astype(np.float32).reshape(-1)
out.tofile(dst)
