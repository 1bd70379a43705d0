#!/usr/bin/env bash
# Installs the Debian packages mlaconf builds with, only those missing. Idempotent; needs root (or sudo).
# Also installs from PyPI, for independent cross-checks in the tests (never used by the product):
# `gguf` (llama.cpp's reader and numpy dequantizer), `regex` and `tokenizers` (HF's BPE).
set -euo pipefail
pkgs=(cmake ninja-build g++ pkg-config ccache libeigen3-dev libhdf5-dev libcli11-dev libgtest-dev
      libpcre2-dev nlohmann-json3-dev libpng-dev python3-numpy python3-h5py python3-pip hdf5-tools clang libclang-rt-14-dev)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
SUDO=""
[ "$(id -u)" = 0 ] || SUDO="sudo"
if [ ${#missing[@]} -gt 0 ]; then
  echo "ci/deps.sh: installing ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
# The gguf cross-check runs under the Debian python (which has numpy and h5py).
if ! /usr/bin/python3 -c "import gguf, regex, tokenizers" 2>/dev/null; then
  /usr/bin/python3 -m pip install -q --break-system-packages gguf regex tokenizers 2>/dev/null \
    || /usr/bin/python3 -m pip install -q gguf regex tokenizers 2>/dev/null \
    || echo "ci/deps.sh: note: PyPI gguf not installed; the gguf cross-check test will report not-supported"
fi
