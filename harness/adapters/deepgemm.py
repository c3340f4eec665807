"""DeepGEMM's indexer logits: ``fp8_mqa_logits`` (prefill) and ``fp8_paged_mqa_logits`` (decode).

DeepGEMM leaves logits outside each window unwritten unless ``clean_logits=True``; the contract
wants -inf there, so the adapter asks for it. The paged kernel needs a schedule from
``get_paged_mqa_logits_metadata(context_lens, block_size, num_sms)``, computed per call.
vLLM's ``vllm.utils.deep_gemm`` wraps the same entry points with the same signatures.
"""

from __future__ import annotations

import importlib

from harness.adapters.base import Adapter
from harness.core.device import multiprocessors

LOGITS_OPS = ("fp8_mqa_logits", "fp8_paged_mqa_logits")


def num_sms(tensor) -> int:
    return multiprocessors(tensor.device) or 1


def deepgemm_logits(dg) -> dict:
    out = {}
    if getattr(dg, "fp8_mqa_logits", None) is not None:
        def fp8_mqa_logits(q, kv, weights, cu_seqlen_ks, cu_seqlen_ke):
            return dg.fp8_mqa_logits(q, kv, weights, cu_seqlen_ks, cu_seqlen_ke, clean_logits=True)

        out["fp8_mqa_logits"] = fp8_mqa_logits
    if (getattr(dg, "fp8_paged_mqa_logits", None) is not None
            and getattr(dg, "get_paged_mqa_logits_metadata", None) is not None):
        def fp8_paged_mqa_logits(q, kv_cache, weights, context_lens, block_tables, max_model_len):
            meta = dg.get_paged_mqa_logits_metadata(context_lens, kv_cache.shape[1], num_sms(q))
            return dg.fp8_paged_mqa_logits(q, kv_cache, weights, context_lens, block_tables, meta,
                                           max_model_len, clean_logits=True)

        out["fp8_paged_mqa_logits"] = fp8_paged_mqa_logits
    return out


def discover():
    return importlib.import_module("deep_gemm")


ADAPTER = Adapter(
    name="deepgemm", package="deep_gemm",
    install_hint="DeepGEMM needs an SM90/SM100 GPU and a source build (deepseek-ai/DeepGEMM)",
    ops={"deepgemm": LOGITS_OPS}, discover=discover,
    bind=lambda api: {"deepgemm": deepgemm_logits(api)}, accumulation={"deepgemm": "fp8-mma"})
