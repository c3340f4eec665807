"""vLLM: its mHC backends, the top-k custom ops, the indexer logits and K-cache ops.

vLLM's own signatures are the contract the harness's ops were written to, so most entries pass
through; what differs is where they live (``torch.ops._C``, ``vllm.utils.deep_gemm``) and the
extra arguments (``clean_logits``, the paged schedule metadata) this adapter supplies.
Implementations: ``vllm-<backend>`` for each mHC backend module (triton, cuda, torch),
``vllm`` for the C++/CUDA ops, ``vllm-deepgemm`` and ``vllm-fallback`` for the indexer logits.
"""

from __future__ import annotations

import importlib

from harness.adapters.base import Adapter, entry, namespace
from harness.adapters.deepgemm import LOGITS_OPS, deepgemm_logits

MHC_BACKENDS = ("triton", "cuda", "torch")
MHC_ENTRY = {"mhc_pre": "mhc_pre_{}", "mhc_post": "mhc_post_{}",
             "mhc_fused_post_pre": "mhc_fused_post_pre_{}", "hc_head": "hc_head_fused_{}"}


def discover():
    import torch

    importlib.import_module("vllm")
    mhc = importlib.import_module("vllm.model_executor.kernels.mhc")
    try:
        importlib.import_module("vllm._C")
    except ImportError:
        pass
    c_ops = getattr(torch.ops, "_C", None)
    cache_ops = getattr(torch.ops, "_C_cache_ops", None)
    try:
        deep_gemm = importlib.import_module("vllm.utils.deep_gemm")
    except ImportError:
        deep_gemm = None
    try:
        fallback = importlib.import_module("vllm.v1.attention.ops.mqa_logits_fallback")
    except ImportError:
        fallback = None
    return namespace(
        mhc={b: {op: entry(mhc, name.format(b)) for op, name in MHC_ENTRY.items()}
             for b in MHC_BACKENDS},
        top_k_per_row_prefill=entry(c_ops, "top_k_per_row_prefill"),
        top_k_per_row_decode=entry(c_ops, "top_k_per_row_decode"),
        indexer_k_quant_and_cache=entry(cache_ops, "indexer_k_quant_and_cache"),
        deep_gemm=deep_gemm, fallback=fallback)


def _fallback_logits(fb) -> dict:
    names = {"fp8_mqa_logits": "fp8_mqa_logits_torch",
             "fp8_paged_mqa_logits": "fp8_paged_mqa_logits_torch"}
    return {op: getattr(fb, name) for op, name in names.items() if getattr(fb, name, None)}


def bind(api) -> dict:
    bound: dict = {}
    for backend, fns in getattr(api, "mhc", {}).items():
        bound[f"vllm-{backend}"] = {op: fn for op, fn in fns.items() if fn is not None}
    own = {op: getattr(api, op) for op in ("top_k_per_row_prefill", "top_k_per_row_decode")
           if getattr(api, op, None) is not None}
    if getattr(api, "indexer_k_quant_and_cache", None) is not None:
        own["indexer_k_quant_and_cache"] = api.indexer_k_quant_and_cache
    bound["vllm"] = own
    if getattr(api, "deep_gemm", None) is not None:
        bound["vllm-deepgemm"] = deepgemm_logits(api.deep_gemm)
    if getattr(api, "fallback", None) is not None:
        bound["vllm-fallback"] = _fallback_logits(api.fallback)
    return bound


ADAPTER = Adapter(
    name="vllm", package="vllm",
    install_hint="install vLLM (pip install vllm, or your build with pip install -e .) to test it",
    ops={**{f"vllm-{b}": tuple(MHC_ENTRY) for b in MHC_BACKENDS},
         "vllm": ("top_k_per_row_prefill", "top_k_per_row_decode", "indexer_k_quant_and_cache"),
         "vllm-deepgemm": LOGITS_OPS, "vllm-fallback": LOGITS_OPS},
    discover=discover, bind=bind, accumulation={"vllm-deepgemm": "fp8-mma"})
