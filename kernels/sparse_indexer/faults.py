"""Seeded faults of the sparse-attention indexer: window and mask slips, the relu moved past
the head sum, a paged kernel that assumes a contiguous cache, the PR 42810 decode slice, and
bf16 intermediates hiding behind an fp8 tensor-core declaration."""

from __future__ import annotations

import torch

from harness.core.faults import SeededFaults
from harness.core.detectors import CALL_SEQUENCE, CUDA_GRAPH, LAYOUTS
from harness.core.layouts import as_aligned_down, as_packed
from kernels.sparse_indexer.probes import (INDEXER_CHECKS, INDEXER_STEP, OUTPUTS_PAST_2_31,
                                           PAGED_FAR_BLOCKS)
from harness.core.registry import Implementation
from kernels.sparse_indexer import torch as ref
from kernels.sparse_indexer.step import StepBatch
from kernels.topk import torch as topk_ref

FAULTS = SeededFaults()


def _impl(op, name, fn) -> Implementation:
    return Implementation(op=op, name=name, fn=fn, source=__name__)


@FAULTS.seed("window_end_inclusive", "fp8_mqa_logits", "index contract", INDEXER_CHECKS)
def window_end_inclusive(threshold: int) -> Implementation:
    """Treats ``cu_seqlen_ke`` as inclusive: every query sees one key too many."""
    def mqa(q, kv, weights, cu_seqlen_ks, cu_seqlen_ke):
        ke = torch.clamp(cu_seqlen_ke + 1, max=kv[0].shape[0]).int()
        return ref.fp8_mqa_logits(q, kv, weights, cu_seqlen_ks, ke)
    return _impl("fp8_mqa_logits", "fault-window-end-inclusive", mqa)


@FAULTS.seed("relu_after_head_sum", "fp8_mqa_logits", "wrong math", INDEXER_CHECKS)
def relu_after_head_sum(threshold: int) -> Implementation:
    """``relu(sum_h w * s)`` instead of ``sum_h w * relu(s)``."""
    def mqa(q, kv, weights, cu_seqlen_ks, cu_seqlen_ke):
        k, scale = kv
        score = torch.einsum("mhd,nd->mhn", q.float(), k.float()) * scale.reshape(-1)
        logits = (score * weights[:, :, None]).sum(dim=1).relu()
        cols = torch.arange(k.shape[0], device=q.device)
        visible = (cols[None, :] >= cu_seqlen_ks[:, None]) & (cols[None, :] < cu_seqlen_ke[:, None])
        return logits.masked_fill(~visible, float("-inf"))
    return _impl("fp8_mqa_logits", "fault-relu-after-head-sum", mqa)


@FAULTS.seed("block_tables_ignored", "fp8_paged_mqa_logits", "out-of-bounds read", INDEXER_CHECKS)
def block_tables_ignored(threshold: int) -> Implementation:
    """Assumes each request's blocks are contiguous in the cache, in request order."""
    def paged(q, kv_cache, weights, context_lens, block_tables, max_model_len):
        bs = kv_cache.shape[1]
        need = (context_lens.long() + bs - 1) // bs
        first = torch.cumsum(need, 0) - need
        cols = torch.arange(block_tables.shape[1], device=block_tables.device)
        contiguous = (first[:, None] + cols[None, :]).clamp_max(kv_cache.shape[0] - 1).int()
        return ref.fp8_paged_mqa_logits(q, kv_cache, weights, context_lens, contiguous,
                                        max_model_len)
    return _impl("fp8_paged_mqa_logits", "fault-block-tables-ignored", paged)


def _decode_rows_real_count(buffer: torch.Tensor, b: StepBatch):
    return buffer[:b.num_decode], b.num_padded_decode


@FAULTS.seed("decode_slice_real_count", "top_k_per_row_decode", "out-of-bounds write", INDEXER_STEP)
def decode_slice_real_count(threshold: int) -> Implementation:
    """The indexer step slices the decode part of ``topk_indices_buffer`` with the real decode
    token count while the top-k (and the reshape after it) use the padded count (PR 42810)."""
    impl = _impl("top_k_per_row_decode", "fault-decode-slice-real-count",
                 ref_topk_decode())
    impl.fn.step_decode_view = _decode_rows_real_count
    return impl


def ref_topk_decode():
    def decode(*args):
        return topk_ref.top_k_per_row_decode(*args)
    return decode


def _bf16_intermediate_mqa(kind: str):
    """Prefill logits computed exactly except for one intermediate rounded to bf16: the head
    weights, the key scales, or each head's q.k score."""
    def mqa(q, kv, weights, cu_seqlen_ks, cu_seqlen_ke):
        k, scale = kv
        scale = scale.reshape(-1).float()
        weights = weights.float()
        if kind == "weights":
            weights = weights.bfloat16().float()
        if kind == "key_scales":
            scale = scale.bfloat16().float()
        score = torch.einsum("mhd,nd->mhn", q.float(), k.float())
        if kind == "scores":
            score = score.bfloat16().float()
        logits = ((score * scale).relu() * weights[:, :, None]).sum(dim=1)
        cols = torch.arange(k.shape[0], device=q.device)
        visible = (cols[None, :] >= cu_seqlen_ks[:, None]) & (cols[None, :] < cu_seqlen_ke[:, None])
        return logits.masked_fill(~visible, float("-inf"))
    return mqa


def _fp8_mma_fault(kind: str) -> Implementation:
    return Implementation(op="fp8_mqa_logits", name=f"fault-bf16-{kind.replace('_', '-')}",
                          fn=_bf16_intermediate_mqa(kind), accumulation="fp8-mma",
                          source=__name__)


@FAULTS.seed("bf16_head_weights", "fp8_mqa_logits", "precision loss inside the fp8-MMA bound",
             INDEXER_CHECKS)
def bf16_head_weights(threshold: int) -> Implementation:
    """Declares fp8 tensor-core accumulation, and rounds the head weights to bf16: an error of
    up to 2^-9 of each head's term, which a bound loose enough for any fp8 kernel would admit."""
    return _fp8_mma_fault("weights")


@FAULTS.seed("bf16_key_scales", "fp8_mqa_logits", "precision loss inside the fp8-MMA bound",
             INDEXER_CHECKS)
def bf16_key_scales(threshold: int) -> Implementation:
    """Declares fp8 tensor-core accumulation, and rounds the per-key fp32 scales to bf16."""
    return _fp8_mma_fault("key_scales")


@FAULTS.seed("bf16_scores", "fp8_mqa_logits", "precision loss inside the fp8-MMA bound",
             INDEXER_CHECKS)
def bf16_scores(threshold: int) -> Implementation:
    """Declares fp8 tensor-core accumulation, and stores each head's q.k score in bf16 (a bf16
    MMA output, as vLLM's torch fallback does)."""
    return _fp8_mma_fault("scores")


@FAULTS.seed("drops_partial_key_block_above_4096", "fp8_mqa_logits", "last partial tile dropped",
             INDEXER_CHECKS)
def drops_partial_key_block_above_4096(threshold: int) -> Implementation:
    """Above 4096 keys, a key-split path forgets the last partial block of 128 keys: those
    logits stay -inf (a dispatch threshold seen only with more than 4096 keys)."""
    def mqa(q, kv, weights, cu_seqlen_ks, cu_seqlen_ke):
        logits = ref.fp8_mqa_logits(q, kv, weights, cu_seqlen_ks, cu_seqlen_ke)
        n = kv[0].shape[0]
        if n > 4096 and n % 128:
            logits[:, n - n % 128:] = float("-inf")
        return logits
    return _impl("fp8_mqa_logits", "fault-drops-partial-key-block-above-4096", mqa)


@FAULTS.seed("paged_bakes_first_call_length", "fp8_paged_mqa_logits", "value baked into a graph",
             CUDA_GRAPH, needs_gpu=True)
def paged_bakes_first_call_length(threshold: int) -> Implementation:
    """Reads its key count on the host once, from the first call's first request, and bounds
    every later call by it: a CUDA graph captured after that call replays the stale bound on new
    context lengths, and eager calls carry it too, so replay and eager agree and only the
    reference sees the lost keys (vLLM PR 42604's full decode graphs replay the capture's
    metadata buffers)."""
    baked: dict = {}

    def paged(q, kv_cache, weights, context_lens, block_tables, max_model_len):
        from harness.core.registry import get

        if "keys" not in baked:
            baked["keys"] = int(context_lens.reshape(-1)[0])
        lens = context_lens.clamp_max(baked["keys"])
        return get("fp8_paged_mqa_logits", "triton").fn(q, kv_cache, weights, lens, block_tables,
                                                       max_model_len)
    return _impl("fp8_paged_mqa_logits", "fault-paged-bakes-first-call-length", paged)


@FAULTS.seed("k_scale_without_floor", "indexer_k_quant_and_cache", "0/0 on an all-zero token",
             INDEXER_CHECKS)
def k_scale_without_floor(threshold: int) -> Implementation:
    """Scales by ``amax / 448`` without the 1e-4 floor: an all-zero K token (padding) gets scale
    0 and NaN values (0 / 0) in the cache."""
    def write(k, kv_cache, slot_mapping, quant_block_size, scale_fmt):
        ref.indexer_k_quant_and_cache(k, kv_cache, slot_mapping, quant_block_size, scale_fmt)
        values, scales = ref.cache_views(kv_cache, k.shape[1], kv_cache.shape[1])
        slots = slot_mapping[:k.shape[0]].long()
        zero = (k.float().abs().amax(-1) == 0) & (slots >= 0)
        blk, off = slots[zero] // kv_cache.shape[1], slots[zero] % kv_cache.shape[1]
        scales[blk, off] = 0.0
        values[blk, off] = torch.full_like(values[blk, off].float(), float("nan")).to(values.dtype)
    return _impl("indexer_k_quant_and_cache", "fault-k-scale-without-floor", write)


@FAULTS.seed("ue8m0_rounds_exact_powers_up", "fp8_quantize_q", "scale off by a power of two",
             INDEXER_CHECKS)
def ue8m0_rounds_exact_powers_up(threshold: int) -> Implementation:
    """Rounds a Q scale up to a power of two as ``2^(floor(log2 r) + 1)``: right unless ``amax /
    448`` is already a power of two, where the scale doubles and every value halves (rows whose
    amax sits exactly at 448 * 2^e, the top of the e4m3 range)."""
    def quantize_q(q, weights, softmax_scale):
        amax = q.float().abs().amax(-1).clamp_min(ref.AMAX_FLOOR)
        scale = torch.exp2(torch.floor(torch.log2((amax.double() / 448.0))) + 1).float()
        values = (q.double() / scale.double().unsqueeze(-1)).float().clamp(-448, 448)
        heads = q.shape[1]
        return (values.to(torch.float8_e4m3fn),
                weights * scale * (float(softmax_scale) * heads ** -0.5))
    return _impl("fp8_quantize_q", "fault-ue8m0-rounds-exact-powers-up", quantize_q)


@FAULTS.seed("empty_context_sees_first_key", "fp8_paged_mqa_logits", "visibility mask",
             INDEXER_CHECKS)
def empty_context_sees_first_key(threshold: int) -> Implementation:
    """Clamps a request's length to at least 1 (``max(len, 1)``, a guard against an empty loop):
    a request with no context sees the key in its first block slot."""
    def paged(q, kv_cache, weights, context_lens, block_tables, max_model_len):
        return ref.fp8_paged_mqa_logits(q, kv_cache, weights, context_lens.clamp_min(1).int(),
                                        block_tables, max_model_len)
    return _impl("fp8_paged_mqa_logits", "fault-empty-context-sees-first-key", paged)


@FAULTS.seed("block_offset_wraps_at_2_31", "fp8_paged_mqa_logits", "32-bit offset overflow",
             PAGED_FAR_BLOCKS, needs_gpu=True)
def block_offset_wraps_at_2_31(threshold: int) -> Implementation:
    """Computes a block's byte offset in signed 32-bit arithmetic: past 2^31 bytes of cache it
    wraps and the kernel reads another block (a cache of more than 254K blocks of 64 slots)."""
    def paged(q, kv_cache, weights, context_lens, block_tables, max_model_len):
        block_bytes = kv_cache[0].numel()
        wrapped = ((block_tables.long() * block_bytes) % 2 ** 31) // block_bytes
        return ref.fp8_paged_mqa_logits(q, kv_cache, weights, context_lens, wrapped.int(),
                                        max_model_len)
    return _impl("fp8_paged_mqa_logits", "fault-block-offset-wraps-at-2-31", paged)


def _block_major_bytes(kv_cache: torch.Tensor) -> torch.Tensor:
    return kv_cache.view(-1)


def _scatter_rows(flat: torch.Tensor, offsets: torch.Tensor, data: torch.Tensor) -> None:
    """``flat[offsets] = data`` where the offset lies inside the buffer; a kernel would write
    past it, which no CPU tensor can show."""
    inside = (offsets >= 0) & (offsets < flat.numel())
    flat[offsets[inside]] = data[inside]


def _write_as(k, kv_cache, slot_mapping, scale_fmt, block_size: int, head_dim: int) -> None:
    """The K-cache write with the block layout of ``block_size`` slots of ``head_dim`` values,
    whatever the cache's own geometry (the right one when both match it)."""
    flat = _block_major_bytes(kv_cache)
    slots = slot_mapping[:k.shape[0]].long()
    keep = slots >= 0
    values, scales = ref.quantize_rows(k[keep], scale_fmt)
    d = k.shape[1]
    block, slot = slots[keep] // block_size, slots[keep] % block_size
    base = block * block_size * (head_dim + 4)
    cols = torch.arange(d, device=k.device)
    _scatter_rows(flat, base[:, None] + slot[:, None] * head_dim + cols[None, :],
                  values.view(torch.uint8))
    scale_at = base + block_size * head_dim + slot * 4
    _scatter_rows(flat, scale_at[:, None] + torch.arange(4, device=k.device)[None, :],
                  scales.view(torch.uint8).view(-1, 4))


@FAULTS.seed("cache_write_assumes_block_size_64", "indexer_k_quant_and_cache", "cache geometry",
             INDEXER_CHECKS)
def cache_write_assumes_block_size_64(threshold: int) -> Implementation:
    """Writes a slot where it would sit in blocks of 64 slots (DeepGEMM's) whatever the cache's
    block size: right at 64, and at any other size its values and scales land in other slots'
    bytes (a block of one slot is ROCm's)."""
    def write(k, kv_cache, slot_mapping, quant_block_size, scale_fmt):
        _write_as(k, kv_cache, slot_mapping, scale_fmt, 64, k.shape[1])
    return _impl("indexer_k_quant_and_cache", "fault-cache-write-assumes-block-size-64", write)


@FAULTS.seed("cache_write_assumes_head_dim_128", "indexer_k_quant_and_cache", "cache geometry",
             INDEXER_CHECKS)
def cache_write_assumes_head_dim_128(threshold: int) -> Implementation:
    """Strides a block's slots by 128 values and puts its scales after 128 x block_size bytes
    (DeepSeek-V3.2's head dim baked in): right at 128, overlapping or misplaced at any other."""
    def write(k, kv_cache, slot_mapping, quant_block_size, scale_fmt):
        _write_as(k, kv_cache, slot_mapping, scale_fmt, kv_cache.shape[1], 128)
    return _impl("indexer_k_quant_and_cache", "fault-cache-write-assumes-head-dim-128", write)


@FAULTS.seed("paged_scale_offset_for_block_size_64", "fp8_paged_mqa_logits", "cache geometry",
             INDEXER_CHECKS)
def paged_scale_offset_for_block_size_64(threshold: int) -> Implementation:
    """Reads a slot's values from the cache's own blocks but its scale at ``block base + 64 *
    head_dim + 4 * slot``, the scale region of a 64-slot block: right at 64, and at any other
    block size the scale comes from other slots' bytes."""
    def paged(q, kv_cache, weights, context_lens, block_tables, max_model_len):
        bs, d = kv_cache.shape[1], q.shape[-1]
        if bs == 64:
            return ref.fp8_paged_mqa_logits(q, kv_cache, weights, context_lens, block_tables,
                                            max_model_len)
        flat = _block_major_bytes(kv_cache)
        misread = kv_cache.clone()
        _, scales = ref.cache_views(misread, d, bs)
        blocks = torch.arange(kv_cache.shape[0], device=kv_cache.device)
        at = (blocks[:, None] * bs * (d + 4) + 64 * d
              + 4 * torch.arange(bs, device=kv_cache.device)[None, :]) % (flat.numel() - 3)
        words = flat[at.reshape(-1, 1) + torch.arange(4, device=kv_cache.device)[None, :]]
        scales.copy_(words.contiguous().view(torch.float32).view(scales.shape))
        return ref.fp8_paged_mqa_logits(q, misread, weights, context_lens, block_tables,
                                        max_model_len)
    return _impl("fp8_paged_mqa_logits", "fault-paged-scale-offset-for-block-size-64", paged)


def _lost_past_2_31(logits: torch.Tensor) -> torch.Tensor:
    """``logits`` as a kernel leaves them that computes an element's offset ``row * width +
    col`` in signed 32 bits: every element past 2^31 lands outside the tensor (its own stays as
    allocated: 0 here)."""
    logits.view(-1)[2 ** 31:] = 0.0
    return logits


@FAULTS.seed("paged_output_offset_wraps_at_2_31", "fp8_paged_mqa_logits", "32-bit offset overflow",
             OUTPUTS_PAST_2_31, needs_gpu=True, fuzz_max_elements=3 * 2 ** 30)
def paged_output_offset_wraps_at_2_31(threshold: int) -> Implementation:
    """Writes logit ``(row, col)`` at the 32-bit element offset ``row * max_model_len + col``:
    past 2^31 logits (B x next_n x max_model_len, a large decode batch at long context) it wraps
    and the last rows are never written."""
    def paged(q, kv_cache, weights, context_lens, block_tables, max_model_len):
        return _lost_past_2_31(ref.fp8_paged_mqa_logits(q, kv_cache, weights, context_lens,
                                                        block_tables, max_model_len))
    return _impl("fp8_paged_mqa_logits", "fault-paged-output-offset-wraps-at-2-31", paged)


@FAULTS.seed("prefill_output_offset_wraps_at_2_31", "fp8_mqa_logits", "32-bit offset overflow",
             OUTPUTS_PAST_2_31, needs_gpu=True, fuzz_max_elements=3 * 2 ** 30)
def prefill_output_offset_wraps_at_2_31(threshold: int) -> Implementation:
    """Writes logit ``(m, n)`` at the 32-bit element offset ``m * N + n``: past 2^31 logits (a
    long prefill chunk over a long context) the last query rows are never written."""
    def mqa(q, kv, weights, cu_seqlen_ks, cu_seqlen_ke):
        return _lost_past_2_31(ref.fp8_mqa_logits(q, kv, weights, cu_seqlen_ks, cu_seqlen_ke))
    return _impl("fp8_mqa_logits", "fault-prefill-output-offset-wraps-at-2-31", mqa)


@FAULTS.seed("block_table_rows_at_packed_width", "fp8_paged_mqa_logits",
             "strided input read as packed", LAYOUTS)
def block_table_rows_at_packed_width(threshold: int) -> Implementation:
    """Finds request b's blocks at ``b * max_blocks`` from the table's first entry instead of at
    ``b * block_tables.stride(0)``: right on a fresh table, another request's blocks (or the
    padding) on a table sliced from a wider one (a graph's table for more blocks). The misread
    ids are clamped to the cache: wrong blocks, never an out-of-bounds read that would kill a
    GPU's context for every later test."""
    def paged(q, kv_cache, weights, context_lens, block_tables, max_model_len):
        misread = as_packed(block_tables).clamp(0, kv_cache.shape[0] - 1)
        return ref.fp8_paged_mqa_logits(q, kv_cache, weights, context_lens, misread,
                                        max_model_len)
    return _impl("fp8_paged_mqa_logits", "fault-block-table-rows-at-packed-width", paged)


@FAULTS.seed("weights_rows_at_packed_width", "fp8_quantize_q", "strided input read as packed",
             LAYOUTS)
def weights_rows_at_packed_width(threshold: int) -> Implementation:
    """Reads token t's head weights at ``t * heads`` from the first weight instead of at
    ``t * weights.stride(0)``: right on packed weights, another token's on weights that are a
    column slice of the projection's output."""
    def quantize_q(q, weights, softmax_scale):
        return ref.fp8_quantize_q(q, as_packed(weights), softmax_scale)
    return _impl("fp8_quantize_q", "fault-weights-rows-at-packed-width", quantize_q)


@FAULTS.seed("k_loads_from_aligned_base", "fp8_quantize_k", "misaligned base read as aligned",
             LAYOUTS)
def k_loads_from_aligned_base(threshold: int) -> Implementation:
    """Loads K from the 16-byte boundary at or below its first element (wide vector loads that
    assume an aligned base): right on a fresh tensor, every row shifted on one whose storage
    offset is off a 16-byte boundary."""
    def quantize_k(k, scale_fmt=None):
        return ref.fp8_quantize_k(as_aligned_down(k), scale_fmt)
    return _impl("fp8_quantize_k", "fault-k-loads-from-aligned-base", quantize_k)


@FAULTS.seed("plan_cached_on_buffer_addresses", "fp8_paged_mqa_logits", "stale metadata",
             CALL_SEQUENCE)
def plan_cached_on_buffer_addresses(threshold: int) -> Implementation:
    """Builds its per-request plan (context lengths and block tables, read on the host) once per
    input buffers, keyed on their addresses and shapes: right for every call on new buffers,
    stale as soon as a decode loop refills the same buffers with the next step's lengths and
    tables (the key misses the values, as vLLM PR 42982's review warned of its metadata cache)."""
    plans: dict = {}

    def paged(q, kv_cache, weights, context_lens, block_tables, max_model_len):
        key = (context_lens.data_ptr(), block_tables.data_ptr(), tuple(context_lens.shape),
               tuple(block_tables.shape))
        if key not in plans:
            plans[key] = (context_lens.clone(), block_tables.clone())
        lens, tables = plans[key]
        return ref.fp8_paged_mqa_logits(q, kv_cache, weights, lens, tables, max_model_len)
    return _impl("fp8_paged_mqa_logits", "fault-plan-cached-on-buffer-addresses", paged)


@FAULTS.seed("first_call_slots_reused", "indexer_k_quant_and_cache", "stale metadata",
             CALL_SEQUENCE)
def first_call_slots_reused(threshold: int) -> Implementation:
    """Resolves slot_mapping into cache positions on its first call and writes every later
    call's tokens to those positions (a mapping computed at warm-up and kept): the second
    step's tokens land in the first step's slots."""
    first: dict = {}

    def write(k, kv_cache, slot_mapping, quant_block_size, scale_fmt):
        kept = first.setdefault("slots", slot_mapping.clone())
        n = min(len(kept), len(slot_mapping))
        capacity = kv_cache.shape[0] * kv_cache.shape[1]
        slots = torch.cat([kept[:n], slot_mapping[n:]]).clamp(-1, capacity - 1)
        ref.indexer_k_quant_and_cache(k, kv_cache, slots, quant_block_size, scale_fmt)
    return _impl("indexer_k_quant_and_cache", "fault-first-call-slots-reused", write)
