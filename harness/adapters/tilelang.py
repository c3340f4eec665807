"""TileLang's mHC kernels, as vLLM ships them (``vllm/model_executor/kernels/mhc/tilelang.py``).

Found and called by name as the vLLM adapter does (``find_mhc_entry``, ``bind_mhc_entry``).
``HARNESS_TILELANG_MHC_MODULE`` may name another module that exposes the same four entry
points (e.g. a TileLang checkout's kernels outside vLLM); otherwise both ``tilelang`` and ``vllm`` must import.
"""

from __future__ import annotations

import importlib
import os

from harness.adapters.base import TF32_GEMM, TF32_OPS, Adapter
from kernels.mhc.ops import MHC_OPS

def discover():
    importlib.import_module("tilelang")
    return importlib.import_module(os.environ.get("HARNESS_TILELANG_MHC_MODULE")
                                   or "vllm.model_executor.kernels.mhc.tilelang")


def bind(module) -> dict:
    """Entry names and parameter names as vLLM's adapter finds them (bound by name)."""
    from harness.adapters.vllm import bind_mhc_entry, find_mhc_entry

    found = {op: find_mhc_entry(module, "tilelang", op) for op in MHC_OPS}
    return {"tilelang": {op: fn if isinstance(fn, str) else bind_mhc_entry(op, fn)
                         for op, fn in found.items()}}


ADAPTER = Adapter(
    name="tilelang", package="tilelang",
    install_hint="pip install tilelang and vLLM (or set HARNESS_TILELANG_MHC_MODULE) to test it",
    ops={"tilelang": MHC_OPS}, discover=discover, bind=bind,
    declared={"tilelang": {op: TF32_GEMM for op in TF32_OPS}})
