"""Device functions that the launches of Triton top-k share (``triton_coarse``'s histogram and
filter, ``triton_finish``'s select): a value's order key and coarse bin, a row's window and
tiles, where a row's finish reads its candidates, and the words a row's programs meet at.

Triton resolves a called ``@triton.jit`` function in the globals of the caller's module, so
every kernel module imports the ones it calls.
"""

from __future__ import annotations

import numpy
import triton
import triton.language as tl

from kernels.runtime.interpreter_speed import vectorised_reduction


NAN_KEY = tl.constexpr(0)
"""The order key of every NaN: below every other key (-inf's is 0x007FFFFF), so a NaN is chosen
only when its row has fewer than top_k other values, and a chosen one is written as -1 (NaN is
never selected: ../shared/spec/ops.md). Only an all-ones bit pattern, itself a NaN, maps there
otherwise."""


@triton.jit
def _order_key(v):
    return tl.where(v != v, NAN_KEY, _key_of_bits(v.to(tl.uint32, bitcast=True)))


@triton.jit
def _key_of_bits(bits):
    return tl.where((bits >> 31) == 1, bits ^ 0xFFFFFFFF, bits | 0x80000000)


@triton.jit
def _or(a, b):
    return a | b


vectorised_reduction(_or, numpy.bitwise_or)  # the CPU interpreter would reduce it in Python


@triton.jit
def _two_ranks(low, high):
    """Exclusive ranks and totals of two kinds of element in a tile (int1 masks), from one
    prefix sum: ``low`` counted in the low 16 bits, ``high`` in the high ones (a tile of fewer
    than 32768)."""
    packed = low.to(tl.int32) | (high.to(tl.int32) << 16)
    rank = tl.cumsum(packed, 0) - packed
    total = tl.sum(packed, 0)
    return rank & 0xFFFF, rank >> 16, total & 0xFFFF, total >> 16


@triton.jit
def _full_tiles_end(lo, hi, TILE: tl.constexpr):
    """Where the whole tiles of [lo, hi) counted from lo end. Loops take those tiles without a
    mask (``FULL``), so a row that starts aligned (every decode row) loads in 16-byte vectors,
    and only the last, partial tile is masked."""
    return lo + tl.maximum(hi - lo, 0) // TILE * TILE


@triton.jit
def _row_tile(row_ptr, stride1, c0, hi, other, TILE: tl.constexpr, FULL: tl.constexpr):
    """Columns [c0, c0 + TILE) of a row, below hi (int32), their values and validity."""
    cols = c0 + tl.arange(0, TILE)
    if FULL:
        m = tl.full((TILE,), 1, tl.int1)
        v = tl.load(row_ptr + cols.to(tl.int64) * stride1)
    else:
        m = cols < hi
        v = tl.load(row_ptr + cols.to(tl.int64) * stride1, mask=m, other=other)
    return cols, v, m


@triton.jit
def _coarse_bin(v, BITS: tl.constexpr):
    h = v.to(tl.float16).to(tl.uint16, bitcast=True).to(tl.int32)
    key = tl.where(h >= 0x8000, h ^ 0xFFFF, h | 0x8000)
    return tl.where(v != v, 0, key >> (16 - BITS))


@triton.jit
def _row_window(r, starts_ptr, ends_ptr, next_n, n_cols, DECODE: tl.constexpr):
    """Clamped [start, end) of row r and an error code (0 fine, 1 end < start, 2 start < 0,
    3 end beyond the logits' columns). Decode: ``ends_ptr`` is seq_lens, flattened when 2-D
    (then next_n is passed as 1)."""
    if DECODE:
        start = tl.zeros((), tl.int64)
        end = tl.load(ends_ptr + r // next_n).to(tl.int64) - next_n + (r % next_n) + 1
        end = tl.maximum(end, 0)
    else:
        start = tl.load(starts_ptr + r).to(tl.int64)
        end = tl.load(ends_ptr + r).to(tl.int64)
    code = tl.where(end < start, 1, tl.where(start < 0, 2, tl.where(end > n_cols, 3, 0)))
    start = tl.minimum(tl.maximum(start, 0), n_cols)
    end = tl.minimum(tl.maximum(end, start), n_cols)
    return start, end, code


@triton.jit
def _reads_row(in_bin, length, cap, REG_TILE: tl.constexpr):
    """Whether the finish reads the row itself, filtered by the threshold bin, instead of the
    candidate buffer: when the bin overflowed the buffer, or holds more than half of a long row
    (then the filter's compaction would write more than the finish's passes save)."""
    return (in_bin > cap) | ((in_bin > REG_TILE) & (in_bin * 2 > length))


@triton.jit
def _range_before_finish(from_row, info_ptr):
    """Whether the threshold bin's key range is known before the long-row finish: when the
    finish reads the row itself (``_reads_row``) and no element lies above the bin. Then the
    histogram pass found it (``_range_in_hist``), or else the filter (``_coarse_filter``)."""
    return from_row & (tl.load(info_ptr + 1, cache_modifier=".cg") == 0)


@triton.jit
def _fold_key_range(fin, lows, highs):
    """Folds a program's lowest and highest candidate keys into the row's finish words (the
    lowest kept inverted, so that both are maxima)."""
    keys = fin.to(tl.pointer_type(tl.uint32))
    tl.atomic_max(keys + 1, tl.min(lows, 0) ^ 0xFFFFFFFF, sem="relaxed", scope="gpu")
    tl.atomic_max(keys + 2, tl.max(highs, 0), sem="relaxed", scope="gpu")


@triton.jit
def _arrives_last(counter_ptr, arrivals):
    """True in the program that arrives last of ``arrivals`` at ``counter_ptr`` (a row's phase,
    a stage of a long row). The barrier puts every thread's writes before the gpu-scope release
    of the counter (the pattern of a grid sync), so the last program sees them all once it has
    acquired the counter."""
    tl.debug_barrier()
    return tl.atomic_add(counter_ptr, 1, sem="acq_rel", scope="gpu") == arrivals - 1
