#!/usr/bin/env bash
# Installs the llama.cpp that `mlaconf answer --backend llama.cpp` loads: the PyPI package llama-cpp-python
# (it builds llama.cpp from source; mlaconf dlopens its lib/libllama.so) into the Debian /usr/bin/python3,
# the python the suites already use. The wheel is built once into a cache folder and installed from
# there afterwards (seconds); a fresh machine builds it (about 25 minutes on 2 shared cores, capped by
# MLACONF_LLAMA_CPP_BUILD_TIMEOUT seconds). Never fatal: without llama_cpp the llama.cpp tests report
# "not supported: llama_cpp not installed". docs/LLAMA_CPP.md says which release is tested.
#
# The negative control's dense release (llama-cpp-python 0.3.34, whose llama.cpp ran glm-dsa without its
# indexer) is never built here: when its wheel is in the cache (MLACONF_LLAMA_CPP_DENSE_BUILD=1 builds it,
# about 18 minutes), its libraries are unpacked to $WHEELS/../mlaconf-llama-dense/lib, where
# suites/llama_cpp finds them (else those cases report not supported).
set -uo pipefail
VERSION="${MLACONF_LLAMA_CPP_VERSION:-0.3.36}"
DENSE_VERSION=0.3.34
WHEELS="${MLACONF_WHEEL_CACHE:-$HOME/.cache/mlaconf-wheels}"
PY=/usr/bin/python3
TIMEOUT="${MLACONF_LLAMA_CPP_BUILD_TIMEOUT:-2700}"

note() { echo "ci/llama_cpp.sh: $*"; }

# The package's Python side (suites/kld_against/llama_cpp_run.py imports llama_cpp to make a real run): its
# runtime dependencies, installed apart since the wheel goes in with --no-deps. numpy comes from ci/deps.sh.
if ! $PY -c "import jinja2, diskcache, typing_extensions" 2>/dev/null; then
  $PY -m pip install -q --break-system-packages jinja2 diskcache typing_extensions 2>/dev/null \
    || $PY -m pip install -q jinja2 diskcache typing_extensions 2>/dev/null \
    || note "could not install jinja2/diskcache; the live kld --against case will report not supported"
fi

# The dense release's libraries, from a cached wheel (unzip of its llama_cpp/lib only; nothing installed).
dense_libs() {
  local w dir
  dir="$(dirname "$WHEELS")/mlaconf-llama-dense"
  w=$(ls "$WHEELS"/llama_cpp_python-"$DENSE_VERSION"-*.whl 2>/dev/null | head -1)
  if [ -z "$w" ] && [ "${MLACONF_LLAMA_CPP_DENSE_BUILD:-0}" = 1 ]; then
    CMAKE_ARGS="-DGGML_NATIVE=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAVA_BUILD=OFF" \
      CMAKE_BUILD_PARALLEL_LEVEL="$(nproc)" timeout "$TIMEOUT" $PY -m pip wheel -q --no-deps -w "$WHEELS" \
      "llama-cpp-python==$DENSE_VERSION" || true
    w=$(ls "$WHEELS"/llama_cpp_python-"$DENSE_VERSION"-*.whl 2>/dev/null | head -1)
  fi
  [ -n "$w" ] || return 0
  [ -s "$dir/lib/libllama.so" ] && return 0
  rm -rf "$dir.tmp" && mkdir -p "$dir.tmp" && $PY -m zipfile -e "$w" "$dir.tmp" >/dev/null 2>&1 \
    && rm -rf "$dir" && mkdir -p "$dir" && mv "$dir.tmp/llama_cpp/lib" "$dir/lib" && rm -rf "$dir.tmp" \
    && note "the dense llama.cpp ($DENSE_VERSION) unpacked to $dir/lib"
}
dense_libs

installed=$($PY -c 'import importlib.metadata as m; print(m.version("llama_cpp_python"))' 2>/dev/null || true)
if [ "$installed" = "$VERSION" ]; then
  note "llama-cpp-python $VERSION already installed"
  exit 0
fi
mkdir -p "$WHEELS" || { note "cannot create $WHEELS"; exit 0; }
wheel=$(ls "$WHEELS"/llama_cpp_python-"$VERSION"-*.whl 2>/dev/null | head -1)
if [ -z "$wheel" ]; then
  note "building the llama-cpp-python $VERSION wheel into $WHEELS (CPU, portable, no tools or tests)"
  start=$(date +%s)
  # GGML_NATIVE=OFF: a wheel that runs on any x86-64 with AVX2 (the cache may move to another machine).
  if ! CMAKE_ARGS="-DGGML_NATIVE=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TOOLS=OFF -DLLAMA_BUILD_SERVER=OFF" \
      CMAKE_BUILD_PARALLEL_LEVEL="$(nproc)" \
      timeout "$TIMEOUT" $PY -m pip wheel -q --no-deps -w "$WHEELS" "llama-cpp-python==$VERSION"; then
    note "could not build llama-cpp-python $VERSION; the llama.cpp tests will report not supported"
    exit 0
  fi
  note "built in $(( $(date +%s) - start )) s"
  wheel=$(ls "$WHEELS"/llama_cpp_python-"$VERSION"-*.whl 2>/dev/null | head -1)
fi
# --no-deps: `answer` loads only the package's libraries; its Python side (kld --against's live run) needs the
# dependencies installed above.
if $PY -m pip install -q --no-deps --force-reinstall --break-system-packages "$wheel" 2>/dev/null \
    || $PY -m pip install -q --no-deps --force-reinstall "$wheel"; then
  note "installed $(basename "$wheel")"
else
  note "could not install $wheel; the llama.cpp tests will report not supported"
fi
exit 0
