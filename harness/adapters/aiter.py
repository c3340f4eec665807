"""AITER (ROCm): mHC pre/post/fused, top-k per row, the indexer logits and K-cache quantisation.

This targets an AITER API (``aiter.mhc_pre``, ``aiter.ops.topk``, ``KVBlockSize``) that a ROCm
build of a newer AITER provides and no installable package does; it is kept for such hosts. The
Triton kernels of PyPI's ``amd-aiter`` are judged on any machine by
:mod:`harness.adapters.aiter_triton`.

Conventions mapped here (from AITER's own signatures):
- ``aiter.mhc_post(out, x, residual, post_layer_mix, comb_res_mix)`` writes into a caller-made
  ``out`` and returns nothing;
- ``aiter.mhc_fused_post_pre`` returns ``(post_mix, comb_mix, layer_input, next_residual)``:
  the harness contract puts the new residual first;
- ``aiter.mhc_pre`` wants ``[T, m, H]`` exactly, so leading dims are flattened and restored; its
  documented ``sinkhorn_repeat=0`` mode with an ``fn`` of ``m`` rows is the ``hc_head`` path;
- top-k takes an optional ``values`` output after ``indices`` (prefill) and ``k`` last;
- the paged logits kernel writes into a caller-made output, pre-filled with -inf here, with the
  cache's block size passed as ``KVBlockSize`` and the cache not pre-shuffled.
"""

from __future__ import annotations

import importlib

import torch

from harness.adapters.base import TF32_GEMM, TF32_OPS, Adapter, entry, namespace

MHC = ("mhc_pre", "mhc_post", "mhc_fused_post_pre", "hc_head")
OTHERS = ("top_k_per_row_prefill", "top_k_per_row_decode", "indexer_k_quant_and_cache",
          "fp8_mqa_logits", "fp8_paged_mqa_logits")


def _optional(module: str, name: str):
    try:
        return getattr(importlib.import_module(module), name, None)
    except ImportError:
        return None


def discover():
    aiter = importlib.import_module("aiter")
    return namespace(
        mhc_pre=entry(aiter, "mhc_pre"), mhc_post=entry(aiter, "mhc_post"),
        mhc_fused_post_pre=entry(aiter, "mhc_fused_post_pre"),
        top_k_per_row_prefill=_optional("aiter.ops.topk", "top_k_per_row_prefill"),
        top_k_per_row_decode=_optional("aiter.ops.topk", "top_k_per_row_decode"),
        indexer_k_quant_and_cache=entry(aiter, "indexer_k_quant_and_cache"),
        fp8_mqa_logits=_optional("aiter.ops.triton.fp8_mqa_logits", "fp8_mqa_logits"),
        deepgemm_fp8_paged_mqa_logits=_optional("aiter.ops.triton.pa_mqa_logits",
                                                "deepgemm_fp8_paged_mqa_logits"))


def _mhc(api) -> dict:
    out = {}
    if getattr(api, "mhc_pre", None) is not None:
        def mhc_pre(residual, fn, hc_scale, hc_base, rms_eps, hc_pre_eps, hc_sinkhorn_eps,
                    hc_post_mult_value, sinkhorn_repeat):
            lead, (m, h) = residual.shape[:-2], residual.shape[-2:]
            post, comb, layer_input = api.mhc_pre(
                residual.reshape(-1, m, h), fn, hc_scale, hc_base, rms_eps, hc_pre_eps,
                hc_sinkhorn_eps, hc_post_mult_value, sinkhorn_repeat)
            return post.view(*lead, m, 1), comb.view(*lead, m, m), layer_input.view(*lead, h)

        def hc_head(hidden_states, hc_fn, hc_scale, hc_base, rms_eps, hc_eps):
            lead, (m, h) = hidden_states.shape[:-2], hidden_states.shape[-2:]
            _, _, out = api.mhc_pre(hidden_states.reshape(-1, m, h), hc_fn, hc_scale, hc_base,
                                    rms_eps, hc_eps, 0.0, 1.0, 0)
            return out.view(*lead, h)

        out.update(mhc_pre=mhc_pre, hc_head=hc_head)
    if getattr(api, "mhc_post", None) is not None:
        def mhc_post(x, residual, post_layer_mix, comb_res_mix):
            result = torch.empty_like(residual)
            api.mhc_post(result, x, residual, post_layer_mix, comb_res_mix)
            return result

        out["mhc_post"] = mhc_post
    if getattr(api, "mhc_fused_post_pre", None) is not None:
        def mhc_fused_post_pre(x, residual, post_layer_mix, comb_res_mix, fn, hc_scale, hc_base,
                               rms_eps, hc_pre_eps, hc_sinkhorn_eps, hc_post_mult_value,
                               sinkhorn_repeat):
            post, comb, layer_input, new_residual = api.mhc_fused_post_pre(
                x, residual, post_layer_mix, comb_res_mix, fn, hc_scale, hc_base, rms_eps,
                hc_pre_eps, hc_sinkhorn_eps, hc_post_mult_value, sinkhorn_repeat)
            return new_residual, post, comb, layer_input

        out["mhc_fused_post_pre"] = mhc_fused_post_pre
    return out


def _others(api) -> dict:
    out = {}
    if getattr(api, "top_k_per_row_prefill", None) is not None:
        def top_k_per_row_prefill(logits, row_starts, row_ends, indices, num_rows, stride0,
                                  stride1, top_k):
            api.top_k_per_row_prefill(logits, row_starts, row_ends, indices, None, num_rows,
                                      stride0, stride1, top_k)

        out["top_k_per_row_prefill"] = top_k_per_row_prefill
    if getattr(api, "top_k_per_row_decode", None) is not None:
        def top_k_per_row_decode(logits, next_n, seq_lens, indices, num_rows, stride0, stride1,
                                 top_k):
            api.top_k_per_row_decode(logits, next_n, seq_lens, indices, num_rows, stride0,
                                     stride1, top_k)

        out["top_k_per_row_decode"] = top_k_per_row_decode
    if getattr(api, "indexer_k_quant_and_cache", None) is not None:
        out["indexer_k_quant_and_cache"] = api.indexer_k_quant_and_cache
    if getattr(api, "fp8_mqa_logits", None) is not None:
        def fp8_mqa_logits(q, kv, weights, cu_seqlen_ks, cu_seqlen_ke):
            k_fp8, k_scale = kv
            return api.fp8_mqa_logits(q, k_fp8, k_scale, weights, cu_seqlen_ks, cu_seqlen_ke)

        out["fp8_mqa_logits"] = fp8_mqa_logits
    if getattr(api, "deepgemm_fp8_paged_mqa_logits", None) is not None:
        def fp8_paged_mqa_logits(q, kv_cache, weights, context_lens, block_tables, max_model_len):
            logits = torch.full((q.shape[0] * q.shape[1], max_model_len), float("-inf"),
                                dtype=torch.float32, device=q.device)
            api.deepgemm_fp8_paged_mqa_logits(q, kv_cache, weights, logits, context_lens,
                                              block_tables, max_model_len, Preshuffle=False,
                                              KVBlockSize=kv_cache.shape[1])
            return logits

        out["fp8_paged_mqa_logits"] = fp8_paged_mqa_logits
    return out


def bind(api) -> dict:
    return {"aiter": {**_mhc(api), **_others(api)}}


ADAPTER = Adapter(
    name="aiter", package="aiter", distributions=("amd-aiter",),
    install_hint="AITER needs a ROCm machine (pip install from ROCm/aiter); the tox env rocm runs it",
    ops={"aiter": MHC + OTHERS}, discover=discover, bind=bind,
    declared={"aiter": {op: TF32_GEMM for op in TF32_OPS}})
