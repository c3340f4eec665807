"""Triton top-k per row: an exact radix select, one program per row.

Each logit maps to an order-preserving uint32 key. Histogram passes over the row's window
(RADIX bits each, most significant first) narrow down the key prefix of the k-th largest element
and count how many elements sharing it are still needed; the search stops as soon as every
element with the prefix is needed (or all 32 bits are fixed). A last pass writes the positions of
every element above the prefix and of that many equal ones (in column order), then -1 in the
unused slots. Rows no longer than top_k skip the search. Exact for any data, ties included.

RADIX=4 rather than 8: on the H100 the 256-bin histogram version took 1.14 ms for one
131072-column row (~3.5 us per 2048-column block); 16 bins with the early stop take 0.40 ms
(kernel alone). A one-hot histogram (compare against every bin, then sum) measured 2.5x slower.
The op's argument checks add a device sync (they read row_ends / seq_lens).
One program per row is latency-bound on long rows: splitting a row over several programs is the
known next step (see the closing note of the top-k issue).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from harness.device import triton_unavailable_reason
from harness.registry import register
from kernels.topk import validate

BLOCK = 8192
SLOT_BLOCK = 1024
NUM_WARPS = 8
RADIX = 4

_REASON = triton_unavailable_reason()
_AVAILABLE = _REASON is None


@triton.jit
def _order_key(v):
    bits = v.to(tl.uint32, bitcast=True)
    return tl.where((bits >> 31) == 1, bits ^ 0xFFFFFFFF, bits | 0x80000000)


@triton.jit
def _topk_rows(logits_ptr, starts_ptr, ends_ptr, idx_ptr, stride0, stride1, idx_stride0,
               idx_stride1, top_k, BLOCK: tl.constexpr, SLOT_BLOCK: tl.constexpr,
               RADIX: tl.constexpr):
    r = tl.program_id(0).to(tl.int64)
    start = tl.load(starts_ptr + r)
    end = tl.load(ends_ptr + r)
    length = tl.maximum(end - start, 0)
    count = tl.minimum(length, top_k)
    row_ptr = logits_ptr + r * stride0
    out_ptr = idx_ptr + r * idx_stride0
    offs = tl.arange(0, BLOCK)
    bins = tl.arange(0, 1 << RADIX)
    prefix = tl.zeros((), dtype=tl.uint32)
    k_rem = count
    shift = 32
    searching = length > top_k
    while searching:
        shift -= RADIX
        hist = tl.zeros((1 << RADIX,), dtype=tl.int32)
        for c0 in range(start, end, BLOCK):
            cols = c0 + offs
            m = cols < end
            v = tl.load(row_ptr + cols.to(tl.int64) * stride1, mask=m, other=0.0)
            key = _order_key(v)
            m = m & (((key >> 1) >> (shift + RADIX - 1)) == prefix)
            digit = ((key >> shift) & ((1 << RADIX) - 1)).to(tl.int32)
            hist += tl.histogram(digit, 1 << RADIX, mask=m)
        greater = tl.sum(hist, 0) - tl.cumsum(hist, 0)
        hit = (greater < k_rem) & (greater + hist >= k_rem)
        b = tl.max(tl.where(hit, bins, -1), 0)
        k_rem -= tl.sum(tl.where(bins == b, greater, 0), 0)
        prefix = (prefix << RADIX) | b.to(tl.uint32)
        in_bin = tl.sum(tl.where(bins == b, hist, 0), 0)
        searching = (shift > 0) & (in_bin != k_rem)
    taken = tl.zeros((), dtype=tl.int32)
    eq_seen = tl.zeros((), dtype=tl.int32)
    for c0 in range(start, end, BLOCK):
        cols = c0 + offs
        m = cols < end
        v = tl.load(row_ptr + cols.to(tl.int64) * stride1, mask=m, other=0.0)
        key = _order_key(v)
        top = tl.where(shift == 0, key, (key >> 1) >> tl.maximum(shift - 1, 0))
        top = tl.where(shift >= 32, 0, top)
        eq = (m & (top == prefix)).to(tl.int32)
        eq_rank = eq_seen + tl.cumsum(eq, 0) - eq
        take = (m & (top > prefix)) | ((eq == 1) & (eq_rank < k_rem))
        t = take.to(tl.int32)
        pos = taken + tl.cumsum(t, 0) - t
        tl.store(out_ptr + pos.to(tl.int64) * idx_stride1, (cols - start).to(tl.int32), mask=take)
        taken += tl.sum(t, 0)
        eq_seen += tl.sum(eq, 0)
    slots = tl.arange(0, SLOT_BLOCK)
    for s0 in range(0, top_k, SLOT_BLOCK):
        s = s0 + slots
        tl.store(out_ptr + s.to(tl.int64) * idx_stride1, tl.full((SLOT_BLOCK,), -1, tl.int32),
                 mask=(s >= count) & (s < top_k))


def _launch(logits, starts, ends, indices, num_rows, stride0, stride1, top_k):
    if num_rows == 0:
        return
    _topk_rows[(num_rows,)](logits, starts, ends, indices, stride0, stride1, indices.stride(0),
                            indices.stride(1), int(top_k), BLOCK=BLOCK, SLOT_BLOCK=SLOT_BLOCK,
                            RADIX=RADIX, num_warps=NUM_WARPS)


@register("top_k_per_row_prefill", "triton", available=_AVAILABLE, reason=_REASON or "",
          batch_invariant=True)
def top_k_per_row_prefill(logits, row_starts, row_ends, indices, num_rows, stride0, stride1,
                          top_k):
    validate.check_prefill(logits, row_starts, row_ends, indices, num_rows, stride0, stride1,
                           top_k)
    _launch(logits, row_starts.contiguous(), row_ends.contiguous(), indices, int(num_rows),
            stride0, stride1, top_k)


@register("top_k_per_row_decode", "triton", available=_AVAILABLE, reason=_REASON or "",
          batch_invariant=True)
def top_k_per_row_decode(logits, next_n, seq_lens, indices, num_rows, stride0, stride1, top_k):
    ends = validate.check_decode(logits, next_n, seq_lens, indices, num_rows, stride0, stride1,
                                 top_k).to(torch.int32)
    _launch(logits, torch.zeros_like(ends), ends, indices, int(num_rows), stride0, stride1, top_k)
