"""AITER's Triton kernels from PyPI's ``amd-aiter``, judged on any machine (interpreted on a CPU).

``harness.adapters.aiter`` targets an AITER API (``aiter.mhc_pre``, ``aiter.ops.topk``) that only
a ROCm build provides. PyPI's ``amd-aiter`` (0.1.7.post2.dev18, AMD's release of ROCm/aiter)
also carries AITER's Triton kernels, the ones behind vLLM's ROCm DeepSeek-V3.2 indexer; they are
loaded without the package's ROCm-only ``__init__`` (:mod:`harness.adapters.aiter_triton_loader`)
and bound here, each entry found by name in its module and its parameters checked by
:mod:`inspect` when the adapter loads:

========================  ====================  ===============================================
implementation            op                    entry (``aiter.ops.triton.``)
========================  ====================  ===============================================
aiter-triton              fp8_mqa_logits        ``fp8_mqa_logits.fp8_mqa_logits``
aiter-triton              fp8_paged_mqa_logits  ``pa_mqa_logits.deepgemm_fp8_paged_mqa_logits``
aiter-triton              fp8_quantize_k        ``quant.dynamic_per_token_quant_fp8_i8``
aiter-triton-ragged-k     fp8_paged_mqa_logits  ``pa_mqa_logits.deepgemm_fp8_paged_mqa_logits_ragged_k``
aiter-triton-stage1       fp8_paged_mqa_logits  ``pa_mqa_logits.deepgemm_fp8_paged_mqa_logits_stage1``
aiter-triton-group-quant  fp8_quantize_k        ``fused_fp8_quant.fused_flatten_fp8_group_quant``
========================  ====================  ===============================================

Conventions mapped, and nothing else:
- ``fp8_mqa_logits(Q, KV, kv_scales, weights, cu_starts, cu_ends)``: the contract's ``kv`` pair
  split in two; the wrapper allocates its own -inf output.
- the paged entries write into a caller-made output, pre-filled with -inf here as vLLM's ROCm
  path does; the block table is AITER's ``kv_indices`` (the kernels read one slot per block:
  ROCm's per-token cache, block size 1); the ragged entry takes the prefix sums of the context
  lengths and each request's slots back to back, read off the block table; the stage-1 entry
  writes per-head scores ``[heads, rows, max_model_len]``, summed over heads as vLLM sums them.
- the quantisers write into caller-made outputs (NaN-filled, so that what a kernel leaves
  unwritten shows) of AITER's fp8 type; the group quantiser sees K as ``[T, 1, D]`` with one
  group per token.
- launch options and guarded outputs: :mod:`harness.adapters.aiter_triton_launch`.
What has no counterpart in this contract is listed as "not this contract" with the reason
(``NOT_THIS_CONTRACT``); inputs an entry documents it cannot take are ``UNSUPPORTED``.
"""

from __future__ import annotations

import inspect

import torch

from harness.adapters.aiter_triton_launch import check_guard, guarded_full, launching
from harness.adapters.aiter_triton_loader import DISTRIBUTION, GFX, INSTALL_HINT, load
from harness.adapters.base import NOT_THIS_CONTRACT, Adapter, namespace
from harness.core.device import triton_compiles_for_nvidia
from harness.core.registry import Unsupported

PACKAGE = "aiter.ops.triton"
ENTRIES = {
    "aiter-triton": {"fp8_mqa_logits": ("fp8_mqa_logits", "fp8_mqa_logits"),
                     "fp8_paged_mqa_logits": ("pa_mqa_logits", "deepgemm_fp8_paged_mqa_logits"),
                     "fp8_quantize_k": ("quant", "dynamic_per_token_quant_fp8_i8")},
    "aiter-triton-ragged-k": {"fp8_paged_mqa_logits": (
        "pa_mqa_logits", "deepgemm_fp8_paged_mqa_logits_ragged_k")},
    "aiter-triton-stage1": {"fp8_paged_mqa_logits": (
        "pa_mqa_logits", "deepgemm_fp8_paged_mqa_logits_stage1")},
    "aiter-triton-group-quant": {"fp8_quantize_k": (
        "fused_fp8_quant", "fused_flatten_fp8_group_quant")},
}
PARAMETERS = {
    "fp8_mqa_logits": ("Q", "KV", "kv_scales", "weights", "cu_starts", "cu_ends"),
    "deepgemm_fp8_paged_mqa_logits": ("q_fp8", "kv_cache_fp8", "weights", "out_logits",
                                      "context_lens", "kv_indices", "max_model_len"),
    "deepgemm_fp8_paged_mqa_logits_ragged_k": ("q_fp8", "kv_cache_fp8", "weights", "out_logits",
                                               "prefix_sum_context_lens", "kv_indices",
                                               "max_model_len"),
    "deepgemm_fp8_paged_mqa_logits_stage1": ("q_fp8", "kv_cache_fp8", "weights", "out_qk",
                                             "context_lens", "kv_indices", "max_model_len"),
    "dynamic_per_token_quant_fp8_i8": ("qx", "x_in", "scale_out"),
    "fused_flatten_fp8_group_quant": ("x", "group_size"),
}
"""The parameters each binding passes by name; any other parameter must have a default."""
OUTPUT_ARGS = {"fp8_mqa_logits": "logits_ptr"}
"""Wrappers that allocate their output: the kernel argument it is passed as (guarded)."""
DTYPES_MODULE = "aiter.utility.dtypes"
TOPK_MODULE = f"{PACKAGE}.topk"
ABSENT = {
    "fp8_quantize_q": "no Triton entry quantises Q per (token, head) with a power-of-two scale "
                      "folded into the head weights",
    "indexer_k_quant_and_cache": "no Triton entry writes K into the paged cache (AITER's is HIP, "
                                 "aiter.ops.cache.indexer_k_quant_and_cache: the ROCm adapter "
                                 "'aiter' judges it on a ROCm host)",
}
"""Contract ops ``aiter-triton`` lists with why this package has no Triton entry for them."""


def discover():
    names = tuple(sorted({f"{PACKAGE}.{module}" for ops in ENTRIES.values()
                          for module, _ in ops.values()} | {TOPK_MODULE, DTYPES_MODULE}))
    modules, version = load(names)
    dtypes = modules.get(DTYPES_MODULE)
    if isinstance(dtypes, str):
        raise ImportError(dtypes)
    return namespace(version=version, modules=modules, fp8=dtypes.fp8)


def _pow2(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0


def _heads(case) -> int:
    return int(case.param("heads", 64))


def _head_dim(case) -> int:
    return int(case.param("head_dim", 128))


POW2_HEADS = Unsupported(
    "AITER's Triton logits kernels lay the heads and head_dim out with tl.arange, which takes "
    "only a power of two (fp8_mqa_logits asserts it: 'num q. heads should be power of 2'); "
    "DeepSeek-V3.2 serves 64 heads of 128", lambda c: not (_pow2(_heads(c)) and _pow2(_head_dim(c))))
PER_TOKEN_CACHE = Unsupported(
    "amd-aiter 0.1.7's Triton paged readers take one slot per block (kv_cache [blocks, 1, 1, "
    "D+4], ROCm's per-token layout) and index the block table per key; blocks of more slots "
    "are read as wrong keys (ROCm/aiter added block sizes > 1 later: PRs 1424, 4440, 4825)",
    lambda c: int(c.param("block_size", 64)) != 1)
NO_UE8M0 = Unsupported(
    f"{NOT_THIS_CONTRACT}AITER's per-token fp8 quantisers have no power-of-two (ue8m0) scale "
    "option", lambda c: c.param("scale_fmt", None) is not None)
UNSUPPORTED = {
    "aiter-triton": {"fp8_mqa_logits": (POW2_HEADS,),
                     "fp8_paged_mqa_logits": (PER_TOKEN_CACHE, POW2_HEADS),
                     "fp8_quantize_k": (NO_UE8M0,)},
    "aiter-triton-ragged-k": {"fp8_paged_mqa_logits": (PER_TOKEN_CACHE, POW2_HEADS)},
    "aiter-triton-stage1": {"fp8_paged_mqa_logits": (PER_TOKEN_CACHE, POW2_HEADS, Unsupported(
        "deepgemm_fp8_paged_mqa_logits_stage1 of amd-aiter 0.1.7 takes heads in chunks of 32 and "
        "asserts heads % 32 == 0 (the CPU profile runs 4 heads)", lambda c: _heads(c) % 32))},
    "aiter-triton-group-quant": {"fp8_quantize_k": (NO_UE8M0, Unsupported(
        "fused_flatten_fp8_group_quant pads a group to a power of two with tl.arange: one group "
        "per token needs a power-of-two head_dim", lambda c: not _pow2(_head_dim(c))))},
}


_FP8_MMA = {"accumulation": "fp8-mma"} if triton_compiles_for_nvidia() else {}
"""Compiled for an NVIDIA GPU, the logits kernels' fp8 tl.dot runs on fp8 tensor cores."""
DECLARED = {
    "aiter-triton": {"fp8_mqa_logits": dict(_FP8_MMA), "fp8_paged_mqa_logits": dict(_FP8_MMA)},
    "aiter-triton-stage1": {"fp8_paged_mqa_logits": dict(_FP8_MMA)},
    "aiter-triton-ragged-k": {"fp8_paged_mqa_logits": {
        **_FP8_MMA, "cuda_graph": "not capturable: the adapter reads each request's slots off "
                                  "the block table with a boolean mask (a host sync)"}},
}


def _checked(fn, name: str):
    """``fn`` when it takes ``PARAMETERS[name]`` by name and needs nothing else, else why not."""
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError) as exc:
        return f"{name} has no readable signature ({exc})"
    missing = [p for p in PARAMETERS[name] if p not in params]
    extra = [p for p, v in params.items() if p not in PARAMETERS[name]
             and v.default is inspect.Parameter.empty
             and v.kind not in (v.VAR_POSITIONAL, v.VAR_KEYWORD)]
    if missing or extra:
        return (f"{name}{inspect.signature(fn)} no longer matches the adapter (missing "
                f"{missing or 'none'}, new required {extra or 'none'}); map it in "
                "harness/adapters/aiter_triton.py")
    return fn


def _mqa_logits(fn):
    def fp8_mqa_logits(q, kv, weights, cu_seqlen_ks, cu_seqlen_ke):
        k_fp8, k_scale = kv
        return fn(Q=q, KV=k_fp8, kv_scales=k_scale, weights=weights, cu_starts=cu_seqlen_ks,
                  cu_ends=cu_seqlen_ke)
    return fp8_mqa_logits


def _paged(fn, name: str):
    def fp8_paged_mqa_logits(q, kv_cache, weights, context_lens, block_tables, max_model_len):
        rows, heads = q.shape[0] * q.shape[1], q.shape[2]
        stage1 = name.endswith("_stage1")
        out, guard = guarded_full((heads, rows, max_model_len) if stage1 else
                                  (rows, max_model_len), float("-inf"), q.device)
        tables = {"context_lens": context_lens, "kv_indices": block_tables}
        if name.endswith("_ragged_k"):
            tables = ragged_tables(context_lens, block_tables)
        fn(q_fp8=q, kv_cache_fp8=kv_cache, weights=weights, max_model_len=max_model_len,
           **{PARAMETERS[name][3]: out}, **tables)
        check_guard(guard, name)
        return out.sum(dim=0) if stage1 else out
    return fp8_paged_mqa_logits


def ragged_tables(context_lens: torch.Tensor, block_tables: torch.Tensor) -> dict:
    """The ragged entry's metadata: the prefix sums of the context lengths, and every request's
    slots (block size 1: its block table's first context_len entries) back to back."""
    lens = context_lens.reshape(-1).to(torch.int32)
    prefix = torch.zeros(lens.numel() + 1, dtype=torch.int32, device=lens.device)
    prefix[1:] = torch.cumsum(lens, 0)
    width = torch.arange(block_tables.shape[1], device=lens.device)
    return {"prefix_sum_context_lens": prefix,
            "kv_indices": block_tables[width[None, :] < lens[:, None]].to(torch.int32)}


def _nan_fp8(shape, fp8, device) -> torch.Tensor:
    return torch.full(shape, 0x7F, dtype=torch.uint8, device=device).view(fp8)


def _per_token_quant(fn, fp8):
    def fp8_quantize_k(k, scale_fmt=None):
        if scale_fmt is not None:
            raise NotImplementedError(f"{NO_UE8M0.reason} (asked for {scale_fmt!r})")
        values = _nan_fp8(k.shape, fp8, k.device)
        scale = torch.full(k.shape[:1], float("nan"), dtype=torch.float32, device=k.device)
        fn(qx=values, x_in=k, scale_out=scale)
        return values, scale
    return fp8_quantize_k


def _group_quant(fn):
    def fp8_quantize_k(k, scale_fmt=None):
        if scale_fmt is not None:
            raise NotImplementedError(f"{NO_UE8M0.reason} (asked for {scale_fmt!r})")
        values, scales = fn(x=k.unsqueeze(1), group_size=k.shape[-1])
        return values, scales.reshape(-1)
    return fp8_quantize_k


def _bind_entry(name: str, fn, fp8):
    try:
        fn = launching(fn, OUTPUT_ARGS.get(name))
    except LookupError as exc:
        return str(exc)
    checked = _checked(fn, name)
    if isinstance(checked, str):
        return checked
    if name == "fp8_mqa_logits":
        return _mqa_logits(fn)
    if name.startswith("deepgemm_fp8_paged_mqa_logits"):
        return _paged(fn, name)
    if name == "dynamic_per_token_quant_fp8_i8":
        return _per_token_quant(fn, fp8)
    return _group_quant(fn)


def _not_this_contract(api) -> dict:
    version = f"{DISTRIBUTION} {api.version}"
    topk = api.modules.get(TOPK_MODULE)
    fn = getattr(topk, "topk", None)
    if callable(fn):
        params = ", ".join(inspect.signature(fn).parameters)
        why = (f"{NOT_THIS_CONTRACT}{TOPK_MODULE}.topk({params}) ({version}) "
               "selects the k largest values of every whole row of a dense [B, M] tensor and "
               "returns them sorted with int64 indices: it takes no row windows (row_starts/"
               "row_ends, or seq_lens with next_n) and pads no slot with -1, which "
               "top_k_per_row_* require. AITER's row-window top-k is HIP (aiter.ops.topk), "
               "judged by the ROCm adapter 'aiter'")
    else:
        why = f"{version}: {TOPK_MODULE} has no topk ({topk if isinstance(topk, str) else ''})"
    out = {op: why for op in ("top_k_per_row_prefill", "top_k_per_row_decode")}
    out.update({op: f"{version}: {reason}" for op, reason in ABSENT.items()})
    return out


def bind(api) -> dict:
    bound: dict[str, dict] = {}
    for impl, ops in ENTRIES.items():
        for op, (module_name, name) in ops.items():
            module = api.modules.get(f"{PACKAGE}.{module_name}")
            fn = getattr(module, name, None) if not isinstance(module, str) else None
            bound.setdefault(impl, {})[op] = (
                module if isinstance(module, str) else
                _bind_entry(name, fn, api.fp8) if callable(fn) else
                f"{DISTRIBUTION} {api.version}: {PACKAGE}.{module_name} has no {name}")
    bound["aiter-triton"].update(_not_this_contract(api))
    return bound


OPS = {impl: tuple(ops) for impl, ops in ENTRIES.items()}
OPS["aiter-triton"] += ("top_k_per_row_prefill", "top_k_per_row_decode") + tuple(ABSENT)

ADAPTER = Adapter(
    name="aiter_triton", package="aiter", distributions=(DISTRIBUTION,), install_hint=INSTALL_HINT, ops=OPS,
    discover=discover, bind=bind, declared=DECLARED, unsupported=UNSUPPORTED,
    triton=frozenset(ENTRIES),
    notice=lambda api: (f"{DISTRIBUTION} {api.version}: its Triton kernels are judged, loaded "
                        f"without the package's ROCm-only __init__ and with AITER's fp8 type of "
                        f"{GFX} (MI355X)"))
