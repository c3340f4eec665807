"""Argument checks of the indexer contract (ops.md section 3), shared by the shipped backends.

The checks of shapes and dtypes run once per call signature (``kernels.runtime.memo``); those of
index values read the device, so they run every call, outside a capture, where asked."""

from __future__ import annotations

import torch

from kernels.runtime.errors import require
from kernels.runtime.memo import per_signature

FP8 = torch.float8_e4m3fn
FP8_MAX = 448.0
SCALE_BYTES = 4


def want(cond: bool, msg) -> None:
    require(cond, msg, section=3)


def _is(t, dtype, dims) -> bool:
    return isinstance(t, torch.Tensor) and t.dtype == dtype and t.dim() == dims


def _desc(t) -> str:
    return f"{getattr(t, 'dtype', type(t).__name__)} {tuple(getattr(t, 'shape', ()))}"


def check_scale_fmt(scale_fmt) -> None:
    want(scale_fmt in (None, "ue8m0"), lambda: f"scale_fmt must be None or 'ue8m0', got {scale_fmt!r}")


@per_signature
def check_quantize_k(k, scale_fmt=None) -> None:
    want(_is(k, torch.bfloat16, 2), lambda: f"k must be bf16 [N, head_dim], got {_desc(k)}")
    check_scale_fmt(scale_fmt)


@per_signature
def check_quantize_q(q, weights, softmax_scale) -> None:
    want(_is(q, torch.bfloat16, 3), lambda: f"q must be bf16 [M, heads, head_dim], got {_desc(q)}")
    want(_is(weights, torch.float32, 2) and tuple(weights.shape) == tuple(q.shape[:2]),
         lambda: f"weights must be float32 [M, heads] = {tuple(q.shape[:2])}, got {_desc(weights)}")
    want(float(softmax_scale) > 0, lambda: f"softmax_scale must be > 0, got {softmax_scale}")


def cache_geometry(kv_cache, head_dim: int) -> tuple[int, int]:
    """(num_blocks, block_size) of a packed cache; any view whose dim 0 is blocks and dim 1 slots,
    with ``block_size * (head_dim + 4)`` bytes per block."""
    want(isinstance(kv_cache, torch.Tensor) and kv_cache.dtype == torch.uint8
         and kv_cache.dim() >= 2 and kv_cache.is_contiguous(),
         lambda: f"kv_cache must be a contiguous uint8 tensor [num_blocks, block_size, ...], got "
         f"{_desc(kv_cache)}")
    num_blocks, block_size = kv_cache.shape[0], kv_cache.shape[1]
    per_block = kv_cache.numel() // num_blocks if num_blocks else 0
    want(num_blocks == 0 or per_block == block_size * (head_dim + SCALE_BYTES),
         lambda: f"kv_cache holds {per_block} bytes per block; block_size {block_size} x (head_dim "
         f"{head_dim} + 4) = {block_size * (head_dim + SCALE_BYTES)} expected")
    return num_blocks, block_size


def capturing(t: torch.Tensor) -> bool:
    """True while ``t``'s stream is being captured into a CUDA graph: no host reads then, so
    the checks of index values are skipped (shapes and dtypes are still checked)."""
    return t.is_cuda and torch.cuda.is_current_stream_capturing()


def check_quant_and_cache(k, kv_cache, slot_mapping, quant_block_size, scale_fmt,
                          values: bool = True) -> tuple[int, int]:
    """Shapes and dtypes; with ``values`` also the slot values (a host read: the Triton op
    checks them in its kernel instead)."""
    geometry = _quant_and_cache_shapes(k, kv_cache, slot_mapping, quant_block_size, scale_fmt)
    if values and not capturing(slot_mapping):
        check_slots(slot_mapping, k.shape[0], geometry)
    return geometry


@per_signature
def _quant_and_cache_shapes(k, kv_cache, slot_mapping, quant_block_size, scale_fmt):
    want(_is(k, torch.bfloat16, 2), lambda: f"k must be bf16 [T, head_dim], got {_desc(k)}")
    want(int(quant_block_size) == k.shape[1],
         lambda: f"quant_block_size {quant_block_size} must equal head_dim {k.shape[1]} (one scale per token)")
    check_scale_fmt(scale_fmt)
    geometry = cache_geometry(kv_cache, k.shape[1])
    want(isinstance(slot_mapping, torch.Tensor) and slot_mapping.dim() == 1
         and slot_mapping.dtype in (torch.int32, torch.int64) and slot_mapping.shape[0] >= k.shape[0],
         lambda: f"slot_mapping must be int32/int64 [>= T={k.shape[0]}], got {_desc(slot_mapping)}")
    return geometry


def check_slots(slot_mapping, tokens: int, geometry: tuple[int, int]) -> None:
    if tokens:
        slots = slot_mapping[:tokens]
        want(int(slots.max()) < geometry[0] * geometry[1] and int(slots.min()) >= -1,
             lambda: f"slot_mapping entries must be -1 or in [0, {geometry[0] * geometry[1]})")


def check_mqa(q, kv, weights, ks, ke, values: bool = True) -> None:
    """Shapes and dtypes; with ``values`` also the windows (a host read: the Triton op checks
    them in its kernel instead)."""
    _mqa_shapes(q, kv, weights, ks, ke)
    if values and not capturing(ks):
        check_windows(ks, ke, kv[0].shape[0])


@per_signature
def _mqa_shapes(q, kv, weights, ks, ke) -> None:
    want(_is(q, FP8, 3), lambda: f"q must be float8_e4m3fn [M, heads, head_dim], got {_desc(q)}")
    want(isinstance(kv, (tuple, list)) and len(kv) == 2, "kv must be the pair (k_fp8, k_scale)")
    k, scale = kv
    want(_is(k, FP8, 2) and k.shape[1] == q.shape[2],
         lambda: f"k_fp8 must be float8_e4m3fn [N, {q.shape[2]}], got {_desc(k)}")
    want(isinstance(scale, torch.Tensor) and scale.dtype == torch.float32
         and scale.reshape(-1).shape[0] == k.shape[0],
         lambda: f"k_scale must be float32 [N={k.shape[0]}], got {_desc(scale)}")
    want(_is(weights, torch.float32, 2) and tuple(weights.shape) == tuple(q.shape[:2]),
         lambda: f"weights must be float32 [M, heads] = {tuple(q.shape[:2])}, got {_desc(weights)}")
    for name, t in (("cu_seqlen_ks", ks), ("cu_seqlen_ke", ke)):
        want(_is(t, torch.int32, 1) and t.shape[0] == q.shape[0],
             lambda: f"{name} must be int32 [M={q.shape[0]}], got {_desc(t)}")


def check_windows(ks, ke, keys: int) -> None:
    if ks.shape[0]:
        bad = (ks < 0).any() | (ke < ks).any() | (ke.max() > keys)
        want(not bool(bad), lambda: f"windows must satisfy 0 <= ks <= ke <= N={keys}")


def check_paged(q, kv_cache, weights, context_lens, block_tables, max_model_len,
                values: bool = True) -> tuple[int, int]:
    """Shapes and dtypes; with ``values`` also the context lengths (a host read: the Triton op
    checks them in its kernel instead)."""
    geometry = _paged_shapes(q, kv_cache, weights, context_lens, block_tables)
    if values and not capturing(context_lens):
        check_context(context_lens, block_tables, geometry[1], max_model_len)
    return geometry


@per_signature
def _paged_shapes(q, kv_cache, weights, context_lens, block_tables) -> tuple[int, int]:
    want(_is(q, FP8, 4), lambda: f"q must be float8_e4m3fn [B, next_n, heads, head_dim], got {_desc(q)}")
    b, next_n, heads, d = q.shape
    geometry = cache_geometry(kv_cache, d)
    want(_is(weights, torch.float32, 2) and tuple(weights.shape) == (b * next_n, heads),
         lambda: f"weights must be float32 [B*next_n, heads] = {(b * next_n, heads)}, got {_desc(weights)}")
    want(_is(context_lens, torch.int32, 1) and context_lens.shape[0] == b,
         lambda: f"context_lens must be int32 [B={b}], got {_desc(context_lens)}")
    want(_is(block_tables, torch.int32, 2) and block_tables.shape[0] == b,
         lambda: f"block_tables must be int32 [B={b}, max_blocks], got {_desc(block_tables)}")
    return geometry


def check_context(context_lens, block_tables, block_size: int, max_model_len: int) -> None:
    if context_lens.shape[0]:
        longest = int(context_lens.max())
        need = (longest + block_size - 1) // block_size
        want(need <= block_tables.shape[1],
             lambda: f"context_lens need {need} blocks but block_tables has {block_tables.shape[1]} columns")
        want(longest <= max_model_len,
             lambda: f"context_lens reach {longest} > max_model_len {max_model_len}")
        want(int(context_lens.min()) >= 0, "context_lens must be >= 0")
