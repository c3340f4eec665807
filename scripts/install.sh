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
$PY -m pip install -q -e ".[test]"
# Liger-Kernel: a pure-Python wheel of Triton kernels (its mHC kernels run under the interpreter
# on CPU); --no-deps keeps it from touching torch/triton. Its adapter is tested for real.
$PY -m pip install -q --no-deps "liger-kernel==0.8.5"
