#!/usr/bin/env bash
# tools/hf_oracle/device_run.sh: runs on the GPU host (CPU only), from the repository root.
#   .hfbin/mlaconf-synth : a static build of `mlaconf` with only the synth subcommand (see docs/HF_CROSSCHECK.md)
#   .whl/gguf-*.whl      : llama.cpp's gguf-py (reader + numpy dequantizer)
# Writes $OUT/<name>.h5 for every case in configs.sh, $OUT/run.log and $OUT/hf_sources.tar.gz (the
# transformers files that were run, for the record).
set -u
OUT=${OUT:-/tmp/hf_out}
mkdir -p "$OUT"
exec > >(tee "$OUT/run.log") 2>&1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/gguf-*.whl || exit 1
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
python3 -c "import transformers, torch, h5py, numpy; print('transformers', transformers.__version__, 'torch', torch.__version__, 'h5py', h5py.__version__, 'numpy', numpy.__version__)"
TF=$(python3 -c "import transformers, os; print(os.path.dirname(transformers.__file__))")
tar czf "$OUT/hf_sources.tar.gz" -C "$TF" models/glm_moe_dsa models/deepseek_v32 models/deepseek_v3/modeling_deepseek_v3.py \
  modeling_rope_utils.py masking_utils.py integrations/moe.py 2>/dev/null
ls "$TF/models" | grep -i -E "deepseek|glm_moe" 
source tools/hf_oracle/configs.sh
chmod +x .hfbin/mlaconf-synth
for c in "${HF_CASES[@]}"; do
  IFS='|' read -r name opts T G <<< "$c"
  if [ -n "${ONLY:-}" ] && [[ ",$ONLY," != *",$name,"* ]]; then continue; fi
  echo "=== $name: mlaconf synth $opts"
  .hfbin/mlaconf-synth synth $opts --out /tmp/$name.gguf || { echo "synth failed for $name"; continue; }
  timeout 400 python3 tools/hf_oracle/make_oracle.py --gguf /tmp/$name.gguf --out "$OUT/$name.h5" --label "$name" \
    --tokens "$T" --greedy "$G" --prompt-seed 1 --synth-cmd "mlaconf synth $opts --out $name.gguf" \
    || echo "make_oracle failed for $name"
done
ls -la "$OUT"
