"""TileLang's mHC kernels, as vLLM ships them (``vllm/model_executor/kernels/mhc/tilelang.py``).

Their signatures are the contract's, so they pass through. ``HARNESS_TILELANG_MHC_MODULE`` may
name another module that exposes the same four entry points (e.g. a TileLang checkout's
kernels outside vLLM); otherwise both ``tilelang`` and ``vllm`` must import.
"""

from __future__ import annotations

import importlib
import os

from harness.adapters.base import Adapter, entry, namespace

ENTRY = {"mhc_pre": "mhc_pre_tilelang", "mhc_post": "mhc_post_tilelang",
         "mhc_fused_post_pre": "mhc_fused_post_pre_tilelang", "hc_head": "hc_head_fused_tilelang"}


def discover():
    importlib.import_module("tilelang")
    module = importlib.import_module(os.environ.get("HARNESS_TILELANG_MHC_MODULE")
                                     or "vllm.model_executor.kernels.mhc.tilelang")
    return namespace(**{op: entry(module, name) for op, name in ENTRY.items()})


def bind(api) -> dict:
    return {"tilelang": {op: getattr(api, op) for op in ENTRY if getattr(api, op, None) is not None}}


ADAPTER = Adapter(
    name="tilelang", package="tilelang",
    install_hint="pip install tilelang and vLLM (or set HARNESS_TILELANG_MHC_MODULE) to test it",
    ops={"tilelang": tuple(ENTRY)}, discover=discover, bind=bind)
