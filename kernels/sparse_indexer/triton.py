"""Triton kernels of the indexer: fp8 quantisation (K, Q, K into the paged cache) and the MQA
logits (ragged prefill, paged decode).

Logits: one program per (query block, key block; key blocks fastest) or (request, split of its
cache blocks); a key tile is loaded once and reused across all heads, each head's scores go
through relu and the head weight before the head sum, and key blocks entirely outside every
window of the query block are skipped (written -inf) so causal prefill does about half the
work. The key scale is positive, so ``relu(s * scale) = scale * relu(s)`` and it is applied once
after the head sum instead of per head: one max and one FMA per score remain on the CUDA cores.
On the GPU the dot products run on fp8 tensor cores; under the CPU interpreter they run in fp32
on the same fp8 values (the contract's "may compute in higher precision").

Index values (windows, context lengths, slots) are checked inside the kernels, which clamp or
skip what is out of range and flag an error word of ``kernels.runtime.deferred`` (no host
synchronisation on the hot path).

Big calls take key blocks of two halves (``_mqa_logits_wide``, chosen by ``key_halves_for``):
every head's Q tile then serves 256 keys, half the L2 reads of Q per FLOP, the same bits. The
prefill kernels stay short of the fp8 roofline because each head's MMA is waited for before its
relu; going further needs asynchronous MMAs across the head loop (Gluon or CUDA). Where the time
goes, the figures and the variants measured are in ``docs/kernels/sparse_indexer.md``.
"""

from __future__ import annotations

import dataclasses
import functools

import torch
import triton
import triton.language as tl

from kernels.runtime import deferred
from kernels.runtime.device import multiprocessors, triton_interpreted, triton_unavailable_reason
from kernels.runtime.memo import per_signature
from harness.core.registry import Unsupported, register
from kernels.sparse_indexer import validate
from kernels.runtime.triton_utils import (Launch, cdiv, div_rn_by_reciprocal, e4m3_cast_rounds, error_word,
                                  next_power_of_2, pow2_ceil, round_to_e4m3)

_INTERPRETED = triton_interpreted()
"""Fixed at import, as Triton's own choice is (see kernels.mhc.triton)."""
_REASON = triton_unavailable_reason()
HEAD_DIMS = (32, 64, 128)
"""The head dims the shipped kernels take: vLLM's indexer's (32, 64, 128), each a power of two
(``tl.arange``) at least one fp8 MMA deep (32); larger heads would need smaller key tiles in the
prefill kernel, which no caller asks for."""
_OTHER_HEAD_DIMS = Unsupported(
    f"the shipped indexer kernels take head_dim in {HEAD_DIMS} (tl.arange over a power of two, "
    "an fp8 MMA at least 32 deep) and refuse others with a ContractError",
    lambda case: case.param("head_dim", 128) not in HEAD_DIMS)
_HERE = {"available": _REASON is None, "reason": _REASON or "", "triton": True,
         "unsupported": (_OTHER_HEAD_DIMS,)}
"""How every kernel of this file registers: runnable where Triton is, launching Triton kernels,
on the head dims they declare."""

DOT_FP32, DOT_FP8, DOT_BF16 = 0, 1, 2


@dataclasses.dataclass(frozen=True)
class LaunchPlan:
    """The launch constants of the logits kernels (the default tuned on the H100 with
    ``benchmarks/bench_indexer.py --tune`` and ``--tune-paged``). Tiles decide which logits a
    program computes, not how: with an fp32 accumulator results must not depend on the plan (the
    knob ``plan``, swept by the config-invariance detector over PLANS; see _FP8_MMA_LOGITS for
    the fp8 path). ``key_halves``: prefill key blocks of one or two ``block_n`` halves, or None
    to choose by size (``key_halves_for``)."""
    block_m: int = 64
    block_n: int = 128
    warps: int = 4
    stages: int = 4
    key_halves: int | None = None
    paged_warps: int = 4
    paged_stages: int = 5
    paged_programs: int = 512

    def __post_init__(self):
        if self.key_halves not in (None, 1, 2):
            raise ValueError(f"LaunchPlan.key_halves must be None (by size), 1 or 2, got "
                             f"{self.key_halves!r}")


DEFAULT_PLAN = LaunchPlan()
PLANS = (DEFAULT_PLAN, LaunchPlan(block_m=32, block_n=64, warps=8, stages=2, key_halves=2,
                                  paged_warps=8, paged_stages=2, paged_programs=64))


@triton.jit
def _quantize(x, UE8M0: tl.constexpr, INTERPRETED: tl.constexpr, CAST_E4M3: tl.constexpr):
    """(e4m3 values, scale) of one row ``x`` (fp32)."""
    scale = _row_scale(tl.max(tl.abs(x), axis=0), UE8M0)
    return _to_e4m3(x, scale, INTERPRETED, CAST_E4M3), scale


@triton.jit
def _row_scale(amax, UE8M0: tl.constexpr):
    scale = tl.math.div_rn(tl.maximum(amax, 1e-4), 448.0)
    if UE8M0:
        scale = pow2_ceil(scale)
    return scale


@triton.jit
def _to_e4m3(x, scale, INTERPRETED: tl.constexpr, CAST_E4M3: tl.constexpr):
    """``x / scale`` (rounded to nearest) clamped to +-448, rounded to e4m3 (ties to even): one
    division a row (``div_rn_by_reciprocal``); by the cast alone where it rounds so
    (``CAST_E4M3``: ``e4m3_cast_rounds``), else on the bits first (``round_to_e4m3``)."""
    q = div_rn_by_reciprocal(x, scale, tl.math.div_rn(1.0, scale), INTERPRETED)
    q = tl.minimum(tl.maximum(q, -448.0), 448.0)
    if not CAST_E4M3:
        q = round_to_e4m3(q)
    return q.to(tl.float8e4nv)


@triton.jit
def _quantize_rows(x_ptr, val_ptr, scale_ptr, D: tl.constexpr, UE8M0: tl.constexpr,
                   INTERPRETED: tl.constexpr, CAST_E4M3: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    d = tl.arange(0, D)
    x = tl.load(x_ptr + row * D + d).to(tl.float32)
    v, scale = _quantize(x, UE8M0, INTERPRETED, CAST_E4M3)
    tl.store(val_ptr + row * D + d, v)
    tl.store(scale_ptr + row, scale)


@triton.jit
def _quantize_q(q_ptr, w_ptr, val_ptr, w_out_ptr, c, D: tl.constexpr, INTERPRETED: tl.constexpr,
                CAST_E4M3: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    d = tl.arange(0, D)
    v, scale = _quantize(tl.load(q_ptr + row * D + d).to(tl.float32), True, INTERPRETED, CAST_E4M3)
    tl.store(val_ptr + row * D + d, v)
    tl.store(w_out_ptr + row, tl.load(w_ptr + row) * scale * c)


@triton.jit(do_not_specialize=["err_slot", "n_tokens"])
def _quant_into_cache(k_ptr, cache_ptr, slot_ptr, err_ptr, err_slot, n_tokens, n_slots,
                      BS: tl.constexpr, D: tl.constexpr, UE8M0: tl.constexpr,
                      TOKENS: tl.constexpr, INTERPRETED: tl.constexpr, CAST_E4M3: tl.constexpr):
    """TOKENS tokens a program (``CACHE_WRITE_TOKENS``; one a program was a quarter of a copy's
    speed at large T: docs/kernels/sparse_indexer.md). Error code 1: a slot below -1, 2: a slot
    past the cache (neither is written); the error word names the token."""
    ts = tl.program_id(0).to(tl.int64) * TOKENS + tl.arange(0, TOKENS)
    t_ok = ts < n_tokens
    slot = tl.load(slot_ptr + ts, mask=t_ok, other=-1).to(tl.int64)
    bad = t_ok & ((slot < -1) | (slot >= n_slots))
    word = tl.max(tl.where(bad, error_word(tl.where(slot < -1, 1, 2), ts), 0), axis=0)
    if word != 0:
        tl.atomic_max(err_ptr + err_slot, word)
    write = t_ok & (slot >= 0) & (slot < n_slots)
    d = tl.arange(0, D)
    x = tl.load(k_ptr + ts[:, None] * D + d[None, :], mask=write[:, None], other=0.0,
                eviction_policy="evict_first")  # read once: keep L2 for the cache's lines
    x = x.to(tl.float32)
    scale = _row_scale(tl.max(tl.abs(x), axis=1), UE8M0)
    block_base = cache_ptr + (slot // BS) * (BS * (D + 4))
    vals = (block_base + (slot % BS) * D).to(tl.pointer_type(tl.float8e4nv))
    tl.store(vals[:, None] + d[None, :], _to_e4m3(x, scale[:, None], INTERPRETED, CAST_E4M3),
             mask=write[:, None])
    scales = (block_base + BS * D).to(tl.pointer_type(tl.float32))
    tl.store(scales + slot % BS, scale, mask=write)


@triton.jit
def _dot(a, b, MODE: tl.constexpr):
    """fp8 operands: on fp8 tensor cores (MODE 1), as bf16 (2; exact, true fp32 accumulation),
    or in fp32 (0; the interpreter)."""
    if MODE == 1:
        return tl.dot(a, b)
    if MODE == 2:
        return tl.dot(a.to(tl.bfloat16), b.to(tl.bfloat16))
    return tl.dot(a.to(tl.float32), b.to(tl.float32), input_precision="ieee")


@triton.jit(do_not_specialize=["err_slot"])
def _mqa_logits(q_ptr, k_ptr, ks_scale_ptr, w_ptr, ks_ptr, ke_ptr, out_ptr, err_ptr, err_slot, M,
                N, H, n_blocks, D: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr,
                DOT: tl.constexpr):
    """One program per (query block, key block of ``n_blocks``), key blocks fastest: the
    programs running at once share a few query blocks (BM x H x D each, the big operand) and all
    of K, so both come from L2 (query blocks fastest re-read all of Q from HBM for every key
    block once Q outgrows L2). Error code: see _flag_bad_windows."""
    pid_m, pid_n = tl.program_id(0) // n_blocks, tl.program_id(0) % n_blocks
    rows = pid_m * BM + tl.arange(0, BM)
    cols = pid_n * BN + tl.arange(0, BN)
    row_ok, col_ok = rows < M, cols < N
    ks = tl.load(ks_ptr + rows, mask=row_ok, other=2147483647)
    ke = tl.load(ke_ptr + rows, mask=row_ok, other=0)
    if pid_n == 0:
        _flag_bad_windows(ks, ke, rows, row_ok, N, err_ptr, err_slot)
    visible = (cols[None, :] >= ks[:, None]) & (cols[None, :] < ke[:, None])
    out_ptrs = out_ptr + rows[:, None].to(tl.int64) * N + cols[None, :]
    store_ok = row_ok[:, None] & col_ok[None, :]
    lo, hi = tl.min(ks, axis=0), tl.max(ke, axis=0)
    if (pid_n * BN >= hi) | (pid_n * BN + BN <= lo):
        tl.store(out_ptrs, tl.full((BM, BN), float("-inf"), tl.float32), mask=store_ok)
        return
    d = tl.arange(0, D)
    k = tl.load(k_ptr + cols[:, None].to(tl.int64) * D + d[None, :], mask=col_ok[:, None], other=0.0)
    kt = tl.trans(k)
    k_scale = tl.load(ks_scale_ptr + cols, mask=col_ok, other=0.0)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    q_rows = q_ptr + rows[:, None].to(tl.int64) * (H * D) + d[None, :]
    for h in range(H):
        q, w = _head_operands(q_rows, w_ptr, rows, row_ok, h, H, D)
        acc = _add_head(acc, q, kt, w, DOT)
    tl.store(out_ptrs, tl.where(visible, acc * k_scale[None, :], float("-inf")), mask=store_ok)


@triton.jit(do_not_specialize=["err_slot"])
def _mqa_logits_wide(q_ptr, k_ptr, ks_scale_ptr, w_ptr, ks_ptr, ke_ptr, out_ptr, err_ptr, err_slot,
                     M, N, H, n_blocks, D: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr,
                     DOT: tl.constexpr):
    """``_mqa_logits`` over key blocks of 2 x BN keys: each head's Q tile (read from L2 for every
    head) serves both halves, half the L2 reads of Q per FLOP, and each half is its own BN-wide
    MMA, so the logits are the narrow kernel's bits. Kept apart from it, line for line as timed:
    at 255 registers, layouts that merely move a pointer computation or share the narrow
    kernel's body are slower (docs/kernels/sparse_indexer.md)."""
    pid_m, pid_n = tl.program_id(0) // n_blocks, tl.program_id(0) % n_blocks
    rows = pid_m * BM + tl.arange(0, BM)
    cols = pid_n * 2 * BN + tl.arange(0, BN)
    cols2 = cols + BN
    row_ok, col_ok, col2_ok = rows < M, cols < N, cols2 < N
    ks = tl.load(ks_ptr + rows, mask=row_ok, other=2147483647)
    ke = tl.load(ke_ptr + rows, mask=row_ok, other=0)
    if pid_n == 0:
        _flag_bad_windows(ks, ke, rows, row_ok, N, err_ptr, err_slot)
    out_ptrs = out_ptr + rows[:, None].to(tl.int64) * N + cols[None, :]
    store_ok = row_ok[:, None] & col_ok[None, :]
    store2_ok = row_ok[:, None] & col2_ok[None, :]
    lo, hi = tl.min(ks, axis=0), tl.max(ke, axis=0)
    if (pid_n * 2 * BN >= hi) | (pid_n * 2 * BN + 2 * BN <= lo):
        tl.store(out_ptrs, tl.full((BM, BN), float("-inf"), tl.float32), mask=store_ok)
        tl.store(out_ptrs + BN, tl.full((BM, BN), float("-inf"), tl.float32), mask=store2_ok)
        return
    d = tl.arange(0, D)
    k = tl.load(k_ptr + cols[:, None].to(tl.int64) * D + d[None, :], mask=col_ok[:, None], other=0.0)
    k2 = tl.load(k_ptr + cols2[:, None].to(tl.int64) * D + d[None, :], mask=col2_ok[:, None],
                 other=0.0)
    kt = tl.trans(k)
    kt2 = tl.trans(k2)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    acc2 = tl.zeros((BM, BN), dtype=tl.float32)
    q_rows = q_ptr + rows[:, None].to(tl.int64) * (H * D) + d[None, :]
    for h in range(H):
        q, w = _head_operands(q_rows, w_ptr, rows, row_ok, h, H, D)
        acc = _add_head(acc, q, kt, w, DOT)
        acc2 = _add_head(acc2, q, kt2, w, DOT)
    k_scale = tl.load(ks_scale_ptr + cols, mask=col_ok, other=0.0)
    visible = (cols[None, :] >= ks[:, None]) & (cols[None, :] < ke[:, None])
    tl.store(out_ptrs, tl.where(visible, acc * k_scale[None, :], float("-inf")), mask=store_ok)
    k_scale2 = tl.load(ks_scale_ptr + cols2, mask=col2_ok, other=0.0)
    visible2 = (cols2[None, :] >= ks[:, None]) & (cols2[None, :] < ke[:, None])
    tl.store(out_ptrs + BN, tl.where(visible2, acc2 * k_scale2[None, :], float("-inf")),
             mask=store2_ok)


_PREFILL_KERNELS = {1: _mqa_logits, 2: _mqa_logits_wide}
"""The prefill logits kernel of each key block width (``LaunchPlan.key_halves``)."""


@triton.jit
def _head_operands(q_rows, w_ptr, rows, row_ok, h, H, D: tl.constexpr):
    """Head ``h``'s query tile and weights of a query block."""
    q = tl.load(q_rows + h * D, mask=row_ok[:, None], other=0.0)
    w = tl.load(w_ptr + rows.to(tl.int64) * H + h, mask=row_ok, other=0.0)
    return q, w


@triton.jit
def _add_head(acc, q, kt, w, DOT: tl.constexpr):
    """``acc`` plus one head's weighted relu scores."""
    return acc + tl.maximum(_dot(q, kt, DOT), 0.0) * w[:, None]


@triton.jit
def _flag_bad_windows(ks, ke, rows, row_ok, N, err_ptr, err_slot):
    """Error word of a query block's windows (its first key block's program): code 1 ke < ks,
    2 ks < 0, 3 ke > N, with the block's last offending row."""
    code = tl.where(ke < ks, 1, tl.where(ks < 0, 2, tl.where(ke > N, 3, 0)))
    word = tl.max(tl.where(row_ok & (code != 0), error_word(code, rows), 0), axis=0)
    if word != 0:
        tl.atomic_max(err_ptr + err_slot, word)


@triton.jit(do_not_specialize=["err_slot"])
def _paged_mqa_logits(q_ptr, cache_ptr, w_ptr, lens_ptr, tables_ptr, out_ptr, err_ptr,
                      err_slot, max_len, table_stride, table_cols, H, n_splits,
                      NEXT_N: tl.constexpr, NP: tl.constexpr, HP: tl.constexpr,
                      BS: tl.constexpr, KT: tl.constexpr, D: tl.constexpr, DOT: tl.constexpr,
                      STAGES: tl.constexpr):
    """One program per (request, split): split ``sp`` of ``n_splits`` takes the request's cache
    blocks sp, sp + n_splits, ... (neighbouring programs read neighbouring blocks); q and the
    head weights are loaded once, every visible block's keys are read once, and the columns
    past the context get -inf.

    The packed uint8 cache is read through two typed pointers to the same bytes (fp8 values,
    fp32 scales), cast here rather than as tensor views on the host, so loads stay vectorised
    and the host makes no views. Scores are keys x heads, so the head sum runs along the MMA's N dimension
    (within a warp; heads x keys put it across warps, through shared memory). Every logit comes
    from one block's dot product whatever the split, so the split (chosen from the batch size)
    cannot change a value. Error code: 1 a context needs more blocks than the table has, 2 a
    context past max_model_len, 3 a negative context (clamped, so no read leaves the table),
    with the request. ``NP``: next_n padded to a power of two (tl.arange's), the padding rows
    masked.

    Keys go in tiles of ``KT`` (``paged_key_tile``): one cache block a tile where blocks hold at
    least 64 slots (one table read, whole blocks loaded), else 64 keys gathered slot by slot
    through the table (blocks of 1 or 16 slots: an MMA needs at least 16 rows, and a block of
    one slot starts at ``block * (D + 4)`` bytes, not 16-byte aligned)."""
    val_ptr = cache_ptr.to(tl.pointer_type(tl.float8e4nv))
    scale_ptr = cache_ptr.to(tl.pointer_type(tl.float32))
    b, sp = tl.program_id(0).to(tl.int64), tl.program_id(1)
    raw = tl.load(lens_ptr + b)
    if sp == 0:
        code = tl.where(raw > max_len, 2, tl.where(raw < 0, 3, tl.where(
            (raw + BS - 1) // BS > table_cols, 1, 0)))
        if code != 0:
            tl.atomic_max(err_ptr + err_slot, error_word(code, b))
    ctx = tl.minimum(tl.maximum(raw, 0), tl.minimum(max_len, table_cols * BS))
    ctx_tiles = tl.cdiv(ctx, KT)
    r = tl.arange(0, NP)
    r_ok = r < NEXT_N
    slot = tl.arange(0, KT)
    row_out = out_ptr + (b * NEXT_N + r)[:, None] * max_len
    out_t = out_ptr + (b * NEXT_N + r)[None, :] * max_len
    pos = ctx - NEXT_N + r
    d = tl.arange(0, D)
    qr = tl.arange(0, NP * HP)
    head = qr % HP
    q_ok = (head < H) & (qr // HP < NEXT_N)
    q_off = (b * NEXT_N + qr // HP) * H + head
    q = tl.load(q_ptr + q_off[:, None] * D + d[None, :], mask=q_ok[:, None], other=0.0)
    w = tl.load(w_ptr + q_off, mask=q_ok, other=0.0)
    table = tables_ptr + b * table_stride
    for j in tl.range(sp, ctx_tiles, n_splits, num_stages=STAGES):
        c = j * KT + slot
        if KT == BS:
            block = tl.load(table + j).to(tl.int64)
            k = tl.load(val_ptr + block * (BS * (D + 4)) + slot[:, None] * D + d[None, :])
            k_scale = tl.load(scale_ptr + block * (BS * (D + 4) // 4) + BS * D // 4 + slot)
        else:
            k, k_scale = _gather_keys(val_ptr, scale_ptr, table, c, ctx, d, BS, D)
        s = tl.maximum(_dot(k, tl.trans(q), DOT), 0.0) * w[None, :]
        logits = tl.sum(tl.reshape(s, (KT, NP, HP)), axis=2) * k_scale[:, None]
        tl.store(out_t + c[:, None], tl.where(c[:, None] <= pos[None, :], logits, float("-inf")),
                 mask=(c < max_len)[:, None] & r_ok[None, :])
    first_past = ctx_tiles + (sp - ctx_tiles % n_splits + n_splits) % n_splits
    for j in range(first_past, tl.cdiv(max_len, KT), n_splits):
        c = j * KT + slot
        tl.store(row_out + c[None, :], tl.full((NP, KT), float("-inf"), tl.float32),
                 mask=(c < max_len)[None, :] & r_ok[:, None])


@triton.jit
def _gather_keys(val_ptr, scale_ptr, table, c, ctx, d, BS: tl.constexpr, D: tl.constexpr):
    """Keys and scales at positions ``c`` of a request, each through its own table entry (blocks
    smaller than a tile); positions past the context read nothing (the table may end there)."""
    in_ctx = c < ctx
    block = tl.load(table + c // BS, mask=in_ctx, other=0).to(tl.int64)
    slot = c % BS
    k = tl.load(val_ptr + (block * (BS * (D + 4)) + slot * D)[:, None] + d[None, :],
                mask=in_ctx[:, None], other=0.0)
    k_scale = tl.load(scale_ptr + block * (BS * (D + 4) // 4) + BS * D // 4 + slot, mask=in_ctx,
                      other=0.0)
    return k, k_scale


def _dot_mode(exact: bool) -> int:
    if triton_interpreted():
        return DOT_FP32
    return DOT_BF16 if exact else DOT_FP8


_ACCUMULATION = "fp32" if triton_interpreted() else "fp8-mma"


@register("fp8_quantize_k", "triton", **_HERE,
          batch_invariant=True)
def fp8_quantize_k(k, scale_fmt=None):
    launch = _quantize_k_call(k, scale_fmt)
    n, d = k.shape
    values = torch.empty((n, d), dtype=validate.FP8, device=k.device)
    scale = torch.empty(n, dtype=torch.float32, device=k.device)
    if launch is not None:
        launch(k.contiguous(), values, scale)
    return values, scale


@per_signature
def _quantize_k_call(k, scale_fmt) -> Launch | None:
    """The K quantiser's checks and launch, once per call signature."""
    validate.check_quantize_k(k, scale_fmt)
    n, d = k.shape
    check_shipped_head_dim(d)
    return Launch(_quantize_rows, (n,), (),
                  dict(D=d, UE8M0=scale_fmt == "ue8m0", INTERPRETED=_INTERPRETED,
                       CAST_E4M3=e4m3_cast_rounds(k.device))) if n else None


@register("fp8_quantize_q", "triton", **_HERE,
          batch_invariant=True)
def fp8_quantize_q(q, weights, softmax_scale):
    launch = _quantize_q_call(q, weights, softmax_scale)
    # packed outputs, whatever the inputs' strides: the kernel writes them flat
    values = torch.empty(q.shape, dtype=validate.FP8, device=q.device)
    w_out = torch.empty(weights.shape, dtype=weights.dtype, device=weights.device)
    if launch is not None:
        launch(q.contiguous(), weights.contiguous(), values, w_out)
    return values, w_out


@per_signature
def _quantize_q_call(q, weights, softmax_scale) -> Launch | None:
    """The Q quantiser's checks and launch, with its weight multiplier rounded to fp32, once per
    call signature (a plain ``softmax_scale`` is keyed by value; a tensor one is not kept)."""
    validate.check_quantize_q(q, weights, softmax_scale)
    m, heads, d = q.shape
    check_shipped_head_dim(d)
    if not m:
        return None
    c = float(torch.tensor(float(softmax_scale) * heads ** -0.5, dtype=torch.float32))
    return Launch(_quantize_q, (m * heads,), (c,),
                  dict(D=d, INTERPRETED=_INTERPRETED, CAST_E4M3=e4m3_cast_rounds(q.device)))


CACHE_WRITE_TOKENS = 8
CACHE_WRITE_WARPS = 2
"""Tokens and warps per program of the K-cache write (16 elements a thread): the fastest of 4 to
32 tokens by 1 to 8 warps on the H100 (docs/kernels/sparse_indexer.md has the sweeps)."""


@register("indexer_k_quant_and_cache", "triton", **_HERE)
def indexer_k_quant_and_cache(k, kv_cache, slot_mapping, quant_block_size, scale_fmt):
    launch, explain = _quant_call(k, kv_cache, slot_mapping, int(quant_block_size), scale_fmt)
    if launch is not None:
        words, slot = deferred.claim(k.device, explain)
        launch(k.contiguous(), kv_cache, slot_mapping.contiguous(), words, slot)
        deferred.launched(words, slot, explain)


@per_signature
def _quant_call(k, kv_cache, slot_mapping, quant_block_size, scale_fmt) -> tuple:
    """The K-cache write's checks (shapes and dtypes: the slots are checked in the kernel),
    launch and error messages, once per call signature."""
    blocks, block_size = validate.check_quant_and_cache(k, kv_cache, slot_mapping,
                                                        quant_block_size, scale_fmt, values=False)
    check_shipped_head_dim(k.shape[1])
    tokens = k.shape[0]
    if not tokens:
        return None, None
    n_slots = blocks * block_size
    return Launch(_quant_into_cache, (cdiv(tokens, CACHE_WRITE_TOKENS),), (tokens, n_slots),
                  dict(BS=block_size, D=k.shape[1], UE8M0=scale_fmt == "ue8m0",
                       TOKENS=CACHE_WRITE_TOKENS, INTERPRETED=_INTERPRETED,
                       CAST_E4M3=e4m3_cast_rounds(k.device),
                       num_warps=CACHE_WRITE_WARPS)), _slot_errors(n_slots)


def _mqa(q, kv, weights, cu_seqlen_ks, cu_seqlen_ke, exact: bool, plan: LaunchPlan):
    out_shape, launch, explain = _mqa_call(q, kv, weights, cu_seqlen_ks, cu_seqlen_ke, exact, plan)
    out = torch.empty(out_shape, dtype=torch.float32, device=q.device)
    if launch is not None:
        k, k_scale = kv
        words, slot = deferred.claim(q.device, explain)
        launch(q.contiguous(), k.contiguous(), k_scale.contiguous(),  # the kernel reads it flat
               weights.contiguous(), cu_seqlen_ks.contiguous(), cu_seqlen_ke.contiguous(), out,
               words, slot)
        deferred.launched(words, slot, explain)
    return out


@per_signature
def _mqa_call(q, kv, weights, cu_seqlen_ks, cu_seqlen_ke, exact: bool, plan: LaunchPlan) -> tuple:
    """The prefill op's checks (shapes and dtypes: the windows are checked in the kernel), output
    shape, launch and error messages, once per call signature (as ``_quant_call``)."""
    validate.check_mqa(q, kv, weights, cu_seqlen_ks, cu_seqlen_ke, values=False)
    (m, heads, d), n = q.shape, kv[0].shape[0]
    check_shipped_head_dim(d)
    if not m:
        return (m, n), None, None
    return (m, n), mqa_launch(m, n, heads, d, exact, plan, q.device), _window_errors(n)


@functools.lru_cache(maxsize=256)
def _window_errors(n: int):
    """The prefill op's error messages, built once per key count."""
    rule = "windows must satisfy 0 <= ks <= ke <= N={n}: row {row} has "
    return deferred.explainer({1: rule + "ke < ks", 2: rule + "ks < 0", 3: rule + "ke > N"}, n=n)


@functools.lru_cache(maxsize=256)
def mqa_launch(m: int, n: int, heads: int, d: int, exact: bool, plan: LaunchPlan,
               device: torch.device) -> Launch:
    """The prefill logits kernel's launch for ``m`` queries of ``heads`` x ``d`` over ``n``
    keys; called with (q, k, k_scale, weights, ks, ke, out, error words, error index)."""
    halves = plan.key_halves or key_halves_for(m, n, plan, device)
    n_blocks = max(1, cdiv(n, halves * plan.block_n))
    return Launch(_PREFILL_KERNELS[halves], (cdiv(m, plan.block_m) * n_blocks,),
                  (m, n, heads, n_blocks),
                  dict(D=d, BM=plan.block_m, BN=plan.block_n, DOT=_dot_mode(exact),
                       num_warps=plan.warps, num_stages=plan.stages))


def launch_mqa(q, k, k_scale, weights, ks, ke, out, exact: bool, plan: LaunchPlan,
               errors=None) -> None:
    """The prefill logits kernel alone, on contiguous arguments (what the tuner times);
    ``errors`` = (words, index) of the window error word (a scratch word when None)."""
    (m, heads, d), n = q.shape, k.shape[0]
    words, slot = errors if errors is not None else (
        torch.zeros(1, dtype=torch.int32, device=q.device), 0)
    mqa_launch(m, n, heads, d, exact, plan, q.device)(q, k, k_scale, weights, ks, ke, out, words,
                                                      slot)


WIDE_FROM_WAVES = 8
"""Two-half key blocks from this many waves of them (2 programs an SM) over full windows.
Two-half blocks are faster on big calls, full or causal, but slower where their working blocks
fill only a few waves and the last runs almost empty (4096 x 4096 causal: 544 working blocks,
2.06 waves). A causal window halves the working blocks; from 8 full-window waves it still leaves
4, while 4096 x 4096 (3.9 waves) keeps one-half blocks. There is no launch of both kinds
(two-half blocks for the first query blocks, one-half for the rest, so the last wave is
fine-grained): it is slower at every split, the two paths in one kernel compiling worse than
either alone. docs/kernels/sparse_indexer.md has the measurements."""


def key_halves_for(m: int, n: int, plan: LaunchPlan, device: torch.device) -> int:
    """Key halves of a prefill call of ``m`` queries and ``n`` keys: 2 for big calls (see
    WIDE_FROM_WAVES). Either choice gives the same logits."""
    wide_blocks = cdiv(m, plan.block_m) * cdiv(n, 2 * plan.block_n)
    sms = multiprocessors(device) or H100_MULTIPROCESSORS
    return 2 if wide_blocks >= WIDE_FROM_WAVES * 2 * sms else 1


H100_MULTIPROCESSORS = 132
"""The count ``key_halves_for`` assumes off a GPU (the CPU interpreter), where it only sets which
calls take two-half key blocks."""


def paged_splits(batch: int, column_tiles: int, plan: LaunchPlan) -> int:
    """Programs per request: about ``paged_programs`` in all, at most one per key tile."""
    return max(1, min(column_tiles, plan.paged_programs // max(batch, 1)))


GATHER_TILE = 64
"""Keys per tile of the paged kernel where a cache block holds fewer (``paged_key_tile``)."""


def paged_key_tile(block_size: int) -> int:
    """Keys a paged-kernel tile covers: a whole block of 64 or more slots (a power of two, for
    ``tl.arange``), else GATHER_TILE keys gathered across blocks of any size below 64."""
    if block_size >= GATHER_TILE:
        validate.want(block_size & (block_size - 1) == 0,
                      lambda: f"the shipped paged kernel takes block_size <= {GATHER_TILE} or a "
                      f"power of two, got {block_size}")
        return block_size
    return GATHER_TILE


def check_shipped_head_dim(d: int) -> None:
    validate.want(d in HEAD_DIMS, lambda: f"the shipped indexer kernels take head_dim in "
                  f"{HEAD_DIMS}, got {d}; use the torch reference for other head dims")


@functools.lru_cache(maxsize=256)
def _context_errors(cols: int, max_model_len: int):
    """The paged op's error messages, built once per table width and max_model_len."""
    return deferred.explainer({
        1: "context_lens need more blocks than block_tables has ({cols} columns): request {row}",
        2: "context_lens reach past max_model_len {mml}: request {row}",
        3: "context_lens must be >= 0: request {row}"}, cols=cols, mml=max_model_len)


@functools.lru_cache(maxsize=256)
def _slot_errors(n_slots: int):
    """The K-cache write's error messages, built once per cache size."""
    rule = "slot_mapping entries must be -1 or in [0, {n}): token {row} has one "
    return deferred.explainer({1: rule + "below -1", 2: rule + "past the cache"}, n=n_slots)


def _paged(q, kv_cache, weights, context_lens, block_tables, max_model_len, exact: bool,
           plan: LaunchPlan):
    # the kernel reads the lengths and each table row at unit stride (rows may be any stride apart)
    context_lens = context_lens.contiguous()
    if block_tables.stride(-1) != 1:
        block_tables = block_tables.contiguous()
    out_shape, launch, explain = _paged_call(q, kv_cache, weights, context_lens, block_tables,
                                             int(max_model_len), exact, plan)
    out = torch.empty(out_shape, dtype=torch.float32, device=q.device)
    if launch is not None:  # the packed uint8 cache: the kernel types its two parts
        words, slot = deferred.claim(q.device, explain)
        launch(q.contiguous(), kv_cache, weights.contiguous(), context_lens, block_tables, out,
               words, slot)
        deferred.launched(words, slot, explain)
    return out


@per_signature
def _paged_call(q, kv_cache, weights, context_lens, block_tables, max_model_len: int,
                exact: bool, plan: LaunchPlan) -> tuple:
    """The paged op's checks (shapes and dtypes: the context lengths are checked in the kernel),
    output shape, launch and error messages, once per call signature (as ``_quant_call``)."""
    _, block_size = validate.check_paged(q, kv_cache, weights, context_lens, block_tables,
                                         max_model_len, values=False)
    b, next_n, heads, d = q.shape
    check_shipped_head_dim(d)
    tile = paged_key_tile(block_size)
    if not (b and max_model_len):
        return (b * next_n, max_model_len), None, None
    splits = paged_splits(b, cdiv(max_model_len, tile), plan)
    return (b * next_n, max_model_len), Launch(
        _paged_mqa_logits, (b, splits),
        (max_model_len, block_tables.stride(0), block_tables.shape[1], heads, splits),
        dict(NEXT_N=next_n, NP=next_power_of_2(next_n), HP=next_power_of_2(heads), BS=block_size,
             KT=tile, D=d, DOT=_dot_mode(exact), STAGES=plan.paged_stages, num_warps=plan.paged_warps)
    ), _context_errors(block_tables.shape[1], max_model_len)


_LOGITS = {**_HERE, "batch_invariant": True, "knobs": {"plan": PLANS}}
_FP8_MMA_LOGITS = {**_LOGITS, "accumulation": _ACCUMULATION}
"""On Hopper fp8 tensor cores the plan picks the MMA shape, and with it the order of the
accumulator's ~14-bit additions: plans differ beyond fp32 rounding there, so each plan is judged
against the reference within the fp8-mma bound (harness.detectors.config_invariance); where the
accumulation is fp32 (the ``-bf16`` variants, the CPU interpreter) plans must also agree with
each other within fp32 rounding."""


@register("fp8_mqa_logits", "triton", **_FP8_MMA_LOGITS)
def fp8_mqa_logits(q, kv, weights, cu_seqlen_ks, cu_seqlen_ke, plan: LaunchPlan = DEFAULT_PLAN):
    return _mqa(q, kv, weights, cu_seqlen_ks, cu_seqlen_ke, exact=False, plan=plan)


@register("fp8_mqa_logits", "triton-bf16", **_LOGITS)
def fp8_mqa_logits_bf16(q, kv, weights, cu_seqlen_ks, cu_seqlen_ke,
                        plan: LaunchPlan = DEFAULT_PLAN):
    """The same kernel with the fp8 values fed to bf16 tensor cores: exact products and a true
    fp32 accumulator, at the bf16 rate."""
    return _mqa(q, kv, weights, cu_seqlen_ks, cu_seqlen_ke, exact=True, plan=plan)


@register("fp8_paged_mqa_logits", "triton", **_FP8_MMA_LOGITS)
def fp8_paged_mqa_logits(q, kv_cache, weights, context_lens, block_tables, max_model_len,
                         plan: LaunchPlan = DEFAULT_PLAN):
    return _paged(q, kv_cache, weights, context_lens, block_tables, max_model_len, exact=False,
                  plan=plan)


@register("fp8_paged_mqa_logits", "triton-bf16", **_LOGITS)
def fp8_paged_mqa_logits_bf16(q, kv_cache, weights, context_lens, block_tables, max_model_len,
                              plan: LaunchPlan = DEFAULT_PLAN):
    return _paged(q, kv_cache, weights, context_lens, block_tables, max_model_len, exact=True,
                  plan=plan)
