"""TileLang's mHC kernels, as vLLM ships them (``vllm/model_executor/kernels/mhc/tilelang.py``).

Found and called by name as the vLLM adapter does (``find_mhc_entry``, ``bind_mhc_entry``).
``HARNESS_TILELANG_MHC_MODULE`` may name another module that exposes the same four entry
points (e.g. a TileLang checkout's kernels outside vLLM); otherwise both ``tilelang`` and ``vllm`` must import.
"""

from __future__ import annotations

import importlib
import os

from harness.adapters.base import TF32_GEMM, TF32_OPS, Adapter
from harness.adapters.token_dims import token_flattened
from kernels.mhc.ops import MHC_OPS

def discover():
    importlib.import_module("tilelang")
    module = os.environ.get("HARNESS_TILELANG_MHC_MODULE")
    if module:
        return importlib.import_module(module)
    from harness.adapters.vllm import import_vllm

    import_vllm()  # vLLM made ready as its own adapter makes it (its compiled extension absent)
    return importlib.import_module("vllm.model_executor.kernels.mhc.tilelang")


def bind(module) -> dict:
    """Entry names and parameter names as vLLM's adapter finds them (bound by name). The kernels
    take ``[T, m, H]`` only ("input a ndim mismatch, expected 3"), so the contract's other
    leading dims are flattened and restored around them."""
    from harness.adapters.vllm import bind_mhc_entry, find_mhc_entry

    found = {op: find_mhc_entry(module, "tilelang", op) for op in MHC_OPS}
    bound = {op: fn if isinstance(fn, str) else bind_mhc_entry(op, fn) for op, fn in found.items()}
    return {"tilelang": {op: token_flattened(op, call) if callable(call) else call
                         for op, call in bound.items()}}


PACKED_INPUTS = {"inputs": "contiguous"}
"""TileLang's compiled kernels check their tensor arguments against a packed ABI before they run
(``kernel hc_prenorm_gemm_tilelang input x strides[0] violates packed ABI constraint``, seen on
the H200 with tilelang 0.1.12), so vLLM's TileLang entries require contiguous inputs: declared,
and a view must be refused by an error that names the input the caller passed. The check
covers strides, not the base address: nothing is declared about alignment."""


ADAPTER = Adapter(
    name="tilelang", package="tilelang",
    install_hint="pip install tilelang and vLLM (or set HARNESS_TILELANG_MHC_MODULE) to test it",
    ops={"tilelang": MHC_OPS}, discover=discover, bind=bind,
    declared={"tilelang": {op: {**PACKED_INPUTS, **(TF32_GEMM if op in TF32_OPS else {})}
                           for op in MHC_OPS}})
