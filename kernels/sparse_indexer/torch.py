"""Torch reference of the indexer ops, exactly per the contract (ops.md section 3).

The registered ``torch`` implementations compute the logits in float32 like vLLM's fallback;
the op specs call the same code with ``compute=torch.float64`` for ground truth (fp8 inputs
are exact in float64, so only the float32 accumulation of an implementation differs).
"""

from __future__ import annotations

import torch

from harness.core.registry import register
from kernels.sparse_indexer import validate
from kernels.sparse_indexer.validate import FP8, FP8_MAX

AMAX_FLOOR = 1e-4


def pow2_ceil(x: torch.Tensor) -> torch.Tensor:
    """2**ceil(log2(x)) for positive float32 ``x``, exactly (frexp, no log rounding)."""
    mant, exp = torch.frexp(x)
    return torch.ldexp(torch.ones_like(x), torch.where(mant == 0.5, exp - 1, exp))


def quantize_rows(x: torch.Tensor, scale_fmt) -> tuple[torch.Tensor, torch.Tensor]:
    """Per row of ``x`` (last dim): scale = max(amax, 1e-4) / 448 (ue8m0: to a power of two);
    values = RTNE(x / scale) in e4m3, saturated at +-448.

    Both quotients are IEEE fp32 divisions (correctly rounded). They are computed in float64 and
    rounded once to fp32, which is exactly that on every device: torch's CUDA ``tensor / scalar``
    multiplies by a rounded reciprocal instead and is off by 1 ulp for some inputs."""
    xf = x.float()
    amax = xf.abs().amax(dim=-1).clamp_min(AMAX_FLOOR)
    scale = (amax.double() / FP8_MAX).float()
    if scale_fmt == "ue8m0":
        scale = pow2_ceil(scale)
    quotient = (xf.double() / scale.double().unsqueeze(-1)).float()
    values = quotient.clamp(-FP8_MAX, FP8_MAX).to(FP8)
    return values, scale


def cache_views(kv_cache: torch.Tensor, head_dim: int, block_size: int):
    """(values [blocks, block_size, head_dim] fp8, scales [blocks, block_size] fp32) views of the
    packed block-major layout: per block all slots' fp8 values, then all slots' fp32 scales."""
    flat = kv_cache.view(kv_cache.shape[0], -1)
    values = flat[:, :block_size * head_dim].view(FP8).view(-1, block_size, head_dim)
    scales = flat[:, block_size * head_dim:].view(torch.float32).view(-1, block_size)
    return values, scales



KV_LAYOUTS = ("normal", "shuffle16")
"""K-cache value layouts within a block: ``normal`` (slot after slot, the contract's) and
``shuffle16`` (16 slots x 16 bytes tiles, vLLM's ROCm writer for blocks of more than one slot,
the layout AITER's paged reader expects)."""


def value_offsets(slot_in_block: torch.Tensor, head_dim: int, layout: str) -> torch.Tensor:
    """[n, head_dim] byte offsets, within a block's value region, of each slot's fp8 values."""
    if layout not in KV_LAYOUTS:
        raise ValueError(f"unknown K-cache layout {layout!r}; declare one of {', '.join(KV_LAYOUTS)}")
    d = torch.arange(head_dim, device=slot_in_block.device)
    s = slot_in_block[:, None]
    if layout == "normal":
        return s * head_dim + d
    return (s // 16) * 16 * head_dim + (s % 16) * 16 + (d // 16) * 256 + d % 16


def write_cache(k, kv_cache, slot_mapping, scale_fmt, layout: str = "normal") -> None:
    """Quantise the rows of ``k`` whose slot is >= 0 into ``kv_cache`` laid out as ``layout``
    (``shuffle16`` applies to blocks of more than one slot; a one-slot block has one layout)."""
    block_size, head_dim = kv_cache.shape[1], k.shape[1]
    if k.shape[0] == 0:
        return
    values, scales = cache_views(kv_cache, head_dim, block_size)
    slots = slot_mapping[:k.shape[0]].long()
    keep = slots >= 0
    kq, ks = quantize_rows(k[keep], scale_fmt)
    blk, off = slots[keep] // block_size, slots[keep] % block_size
    scales[blk, off] = ks
    if layout == "normal" or block_size == 1:
        values[blk, off] = kq
        return
    flat = values.view(values.shape[0], -1)
    flat[blk[:, None], value_offsets(off, head_dim, layout)] = kq


def mqa_logits(q, k, k_scale, weights, ks, ke, dtype) -> torch.Tensor:
    """``sum_h w[m,h] * relu((q[m,h] . k[n]) * k_scale[n])`` computed and returned in ``dtype``
    (float32 for the registered op, float64 for ground truth), -inf outside [ks, ke)."""
    m, n = q.shape[0], k.shape[0]
    out = torch.full((m, n), float("-inf"), dtype=dtype, device=q.device)
    if m == 0 or n == 0:
        return out
    kf, sf, wf = k.to(dtype), k_scale.reshape(-1).to(dtype), weights.to(dtype)
    cols = torch.arange(n, device=q.device)
    chunk = max(1, (1 << 26) // max(1, n * q.shape[1]))
    for r0 in range(0, m, chunk):
        qf = q[r0:r0 + chunk].to(dtype)
        score = torch.einsum("mhd,nd->mhn", qf, kf) * sf
        logits = (score.relu() * wf[r0:r0 + chunk, :, None]).sum(dim=1)
        visible = (cols[None, :] >= ks[r0:r0 + chunk, None]) & (cols[None, :] < ke[r0:r0 + chunk, None])
        out[r0:r0 + chunk] = logits.masked_fill(~visible, float("-inf"))
    return out


def mqa_bound(q, k, k_scale, weights, ks, ke) -> torch.Tensor:
    """float64 ``sum_h |w| * sum_d |q k| * k_scale``: the magnitude every accumulation error of
    the logits scales with; the spec's tolerance is a multiple of it."""
    m, n = q.shape[0], k.shape[0]
    out = torch.zeros((m, n), dtype=torch.float64, device=q.device)
    if m == 0 or n == 0:
        return out
    kf, sf, wf = k.double().abs(), k_scale.reshape(-1).double(), weights.double().abs()
    chunk = max(1, (1 << 26) // max(1, n * q.shape[1]))
    for r0 in range(0, m, chunk):
        score = torch.einsum("mhd,nd->mhn", q[r0:r0 + chunk].double().abs(), kf) * sf
        out[r0:r0 + chunk] = (score * wf[r0:r0 + chunk, :, None]).sum(dim=1)
    return out


def paged_positions(context_lens: torch.Tensor, next_n: int) -> torch.Tensor:
    """[B*next_n] position of each query row: ``context_lens[b] - next_n + j``."""
    j = torch.arange(next_n, device=context_lens.device)
    return (context_lens.long()[:, None] - next_n + j[None, :]).reshape(-1)


def gather_paged_keys(kv_cache, block_tables, b: int, length: int, head_dim: int, block_size: int):
    """(k_fp8 [length, D], k_scale [length]) of request ``b``, read through its block table."""
    values, scales = cache_views(kv_cache, head_dim, block_size)
    pos = torch.arange(length, device=kv_cache.device)
    blocks = block_tables[b].long()[pos // block_size]
    return values[blocks, pos % block_size], scales[blocks, pos % block_size]


def paged_logits(q, kv_cache, weights, context_lens, block_tables, max_model_len, dtype):
    b, next_n, heads, d = q.shape
    _, block_size = validate.cache_geometry(kv_cache, d)
    out = torch.full((b * next_n, max_model_len), float("-inf"), dtype=torch.float32,
                     device=q.device)
    positions = paged_positions(context_lens, next_n)
    for i in range(b):
        length = min(int(context_lens[i]), max_model_len)
        if length <= 0:
            continue
        k, scale = gather_paged_keys(kv_cache, block_tables, i, length, d, block_size)
        rows = slice(i * next_n, (i + 1) * next_n)
        ke = (positions[rows] + 1).clamp(0, length).int()
        out[rows, :length] = mqa_logits(q[i], k, scale, weights[rows], torch.zeros_like(ke), ke,
                                        dtype)
    return out


@register("fp8_quantize_k", "torch")
def fp8_quantize_k(k, scale_fmt=None):
    validate.check_quantize_k(k, scale_fmt)
    return quantize_rows(k, scale_fmt)


@register("fp8_quantize_q", "torch")
def fp8_quantize_q(q, weights, softmax_scale):
    validate.check_quantize_q(q, weights, softmax_scale)
    values, scale = quantize_rows(q, "ue8m0")
    heads = q.shape[1]
    return values, weights * scale * (float(softmax_scale) * heads ** -0.5)


@register("indexer_k_quant_and_cache", "torch", declared={
    "cuda_graph": "not capturable: the reference selects the rows to write by a boolean mask "
                  "(a host sync)"})
def indexer_k_quant_and_cache(k, kv_cache, slot_mapping, quant_block_size, scale_fmt):
    validate.check_quant_and_cache(k, kv_cache, slot_mapping, quant_block_size, scale_fmt)
    write_cache(k, kv_cache, slot_mapping, scale_fmt)


@register("fp8_mqa_logits", "torch")
def fp8_mqa_logits(q, kv, weights, cu_seqlen_ks, cu_seqlen_ke):
    validate.check_mqa(q, kv, weights, cu_seqlen_ks, cu_seqlen_ke)
    return mqa_logits(q, kv[0], kv[1], weights, cu_seqlen_ks, cu_seqlen_ke, torch.float32)


@register("fp8_paged_mqa_logits", "torch", declared={
    "cuda_graph": "not capturable: the reference loops over the requests, reading each one's "
                  "length on the host"})
def fp8_paged_mqa_logits(q, kv_cache, weights, context_lens, block_tables, max_model_len):
    validate.check_paged(q, kv_cache, weights, context_lens, block_tables, max_model_len)
    return paged_logits(q, kv_cache, weights, context_lens, block_tables, max_model_len,
                        torch.float32)

