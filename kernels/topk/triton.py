"""Triton top-k per row: exact, with each row split over many programs.

Three or four launches, no host synchronisation between them (``docs/kernels/topk.md`` walks
through each):

1. ``_coarse_hist``: per chunk of a row, a histogram over a coarse, order-preserving bin (the top
   bits of the fp16-rounded order key); the row's last program finds the threshold bin b* that
   holds the k-th largest element and gives every chunk its offsets.
2. ``_coarse_filter``: writes every element above b* straight into ``indices`` and compacts the
   elements in b* into a candidate buffer (or leaves the row to be read whole when b* overflows
   it or holds most of a long row, as on tie-heavy rows).
3. ``_finish_short``: an exact radix select (5-bit digits) of the remaining ``k - above`` slots
   on candidates kept in registers, then -1 in the unused slots.
4. ``_finish_long``: the same select for rows of more than ``reg_tile`` candidates, spread over
   several programs a row whose stages are chained by ticket counters (no deadlock whatever the
   residency; under the interpreter the row's first program does them all).

Offsets come from prefix sums, not atomics, so the output (set and order: elements above b* in
column order, then the chosen candidates in column order; equal values taken lowest column
first) depends only on the row, whatever the chunking, the launch split or the rest of the batch.

Window values (row_starts / row_ends / seq_lens) are checked inside the kernels: they are
clamped so no access leaves the row, and the worst error (code and row) is kept in an error
word of ``kernels.runtime.deferred``: no host synchronisation on the hot path; the contract error
is raised by ``deferred.raise_pending()`` (the harness calls it after every call it judges).

NaN is never selected (../shared/spec/ops.md): its order key (``NAN_KEY``) is below every other,
so a NaN is chosen only when a row has fewer than top_k other values, and a chosen one is
written as -1. Every pass is bound by its instructions, not by memory, so the kernels keep them
few (int32 index arithmetic, unmasked whole tiles, one prefix sum for two counts); figures and
the designs measured are in ``docs/kernels/topk.md``.
"""

from __future__ import annotations

import dataclasses
import functools

import numpy
import torch
import triton
import triton.language as tl

from kernels.runtime import deferred
from kernels.runtime.device import triton_interpreted, triton_unavailable_reason
from kernels.runtime.interpreter_speed import vectorised_reduction
from harness.core.registry import register
from kernels.topk import validate
from kernels.runtime.triton_utils import Launch, cdiv, error_word, next_power_of_2

@dataclasses.dataclass(frozen=True)
class LaunchPlan:
    """The launch constants of one call. The output depends only on the row, whatever the plan
    (the kernels' claim; the config-invariance detector checks it over PLANS): ``coarse_bits``
    None picks by shape (``coarse_bits()``); long rows get ``finish_slices()`` programs each,
    from ``finish_programs`` and ``slice_min``. ``split_finish`` False finishes short rows in
    the filter launch instead of their own: one launch fewer, for eager callers bound by the
    host's cost per launch, but slower on the GPU: split, a lean filter kernel is not held back
    by the finishing select's registers, and the finish gets its own warps.
    ``radix``: bits per digit of the radix select (digits sit at multiples of it, so where it
    does not divide 32 the top digit is narrower). 5 gives 32 bins, one per lane in
    ``tl.histogram``'s ballot scheme, and fewer passes than 4: the fastest radix on every shape
    of ``bench_topk.py``. ``row_bits``: the histogram pass also folds which bits of every row's
    values differ from the row's first value (one LOP3 an element), so that a row
    held whole by its threshold bin (a tie-heavy row) gets its key range there and the filter
    launch has nothing to read for it; False leaves that pass to the filter. ``filter_regs``:
    registers per thread of the filter kernel (``maxnreg``; None or 0 leaves it to the compiler).
    64 holds twice the programs per SM, which makes random rows faster; the same cap on the
    long-row finish makes tie rows slower (docs/kernels/topk.md has the measurements of
    ``split_finish``, ``radix`` and ``filter_regs``)."""
    coarse_bits: int | None = None
    hist_tile: int = 2048
    hist_warps: int = 8
    filter_tile: int = 1024
    filter_warps: int = 4
    finish_tile: int = 1024
    small_tile: int = 1024
    reg_tile: int = 4096
    radix: int = 5
    split_finish: bool = True
    finish_warps: int = 8
    slot_block: int = 1024
    scan_splits: int = 64
    max_chunk: int = 16384
    target_programs: int = 1024
    candidate_budget: int = 1 << 23
    finish_programs: int = 512
    slice_min: int = 2048
    long_warps: int = 4
    row_bits: bool = True
    filter_regs: int | None = 64


DEFAULT_PLAN = LaunchPlan()
PLANS = (
    DEFAULT_PLAN,
    LaunchPlan(coarse_bits=8, small_tile=16, radix=4),
    LaunchPlan(coarse_bits=6, split_finish=False, small_tile=16, reg_tile=32, finish_tile=64,
               row_bits=False),
    LaunchPlan(candidate_budget=1, finish_tile=256, reg_tile=512,
               slice_min=512),
)
"""Plans that route small calls through every finishing path (registers with a small or a full
tile, the long-row stages on the candidate buffer with one program a row, and on the row itself
when the buffer overflows with several), in the filter launch and in their own, with a tie row's
key range found in the histogram pass or the filter: the knob ``plan`` of the registered ops."""

_REASON = triton_unavailable_reason()
_HERE = {"available": _REASON is None, "reason": _REASON or "", "triton": True}
"""How every kernel of this file registers: runnable where Triton is, launching Triton kernels."""


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
def _masked_hist(x, m, NBINS: tl.constexpr, FULL: tl.constexpr):
    """tl.histogram of x where m; a full tile needs no mask (one ballot less an element)."""
    if FULL:
        return tl.histogram(x, NBINS)
    return tl.histogram(x, NBINS, mask=m)


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
def _range_in_hist(in_bin, length, ROW_BITS: tl.constexpr):
    """Whether the histogram pass gives the threshold bin's key range (the plan's
    ``row_bits``): when every element of the row lies in the bin (a tie-heavy row), the range
    of the row's bits is the bin's (``_row_bits_range``)."""
    if ROW_BITS:
        return in_bin == length
    return in_bin < 0


@triton.jit
def _row_bits_range(first, differ):
    """A key range holding every key of a row, from its first value's bits and the bits in
    which any of its values differ from them: every value's bits lie between ``first`` with
    those bits cleared and with them set. With one sign the order key is a monotone bitwise map
    of the bits, so every key lies between the keys of those two, which differ in exactly
    ``differ`` (the search starts at the same digit as from the exact range); with both signs,
    the whole key space."""
    first = first.to(tl.uint32, bitcast=True)
    differ = differ.to(tl.uint32, bitcast=True)
    common, ones = first & (differ ^ 0xFFFFFFFF), first | differ
    a, b = _key_of_bits(common), _key_of_bits(ones)
    no_nan = (ones & 0x7F800000) != 0x7F800000  # else a NaN's key (NAN_KEY) may be in the row
    one_sign = ((differ >> 31) == 0) & no_nan
    return (tl.where(one_sign, tl.minimum(a, b), 0),
            tl.where(one_sign, tl.maximum(a, b), 0xFFFFFFFF))


@triton.jit
def _fold_key_range(fin, lows, highs):
    """Folds a program's lowest and highest candidate keys into the row's finish words (the
    lowest kept inverted, so that both are maxima)."""
    keys = fin.to(tl.pointer_type(tl.uint32))
    tl.atomic_max(keys + 1, tl.min(lows, 0) ^ 0xFFFFFFFF, sem="relaxed", scope="gpu")
    tl.atomic_max(keys + 2, tl.max(highs, 0), sem="relaxed", scope="gpu")


@triton.jit
def _key_range(fin):
    """The row's lowest and highest candidate key, once every program has folded its own."""
    keys = fin.to(tl.pointer_type(tl.uint32))
    return (tl.load(keys + 1, cache_modifier=".cg") ^ 0xFFFFFFFF,
            tl.load(keys + 2, cache_modifier=".cg"))


@triton.jit
def _finish_source(in_bin, length, top_k, cap, REG_TILE: tl.constexpr):
    """Where a row's finish reads its candidates (``_reads_row``), how many it reads, and
    whether the row is long (a select among more than REG_TILE of them: ``_finish_long``)."""
    from_row = _reads_row(in_bin, length, cap, REG_TILE)
    n = tl.where(from_row, length, in_bin)
    return from_row, n, (length > top_k) & (n > REG_TILE)


@triton.jit
def _arrives_last(counter_ptr, arrivals):
    """True in the program that arrives last of ``arrivals`` at ``counter_ptr`` (a row's phase,
    a stage of a long row). The barrier puts every thread's writes before the gpu-scope release
    of the counter (the pattern of a grid sync), so the last program sees them all once it has
    acquired the counter."""
    tl.debug_barrier()
    return tl.atomic_add(counter_ptr, 1, sem="acq_rel", scope="gpu") == arrivals - 1


@triton.jit(do_not_specialize=["err_slot"])
def _coarse_hist(logits_ptr, starts_ptr, ends_ptr, ws_ptr, sync_ptr, err_ptr, err_slot, stride0,
                 stride1, next_n, n_cols, top_k, n_rows, n_chunks, chunk, info_at, offs_at, fin_at,
                 fin_words, bits_at, DECODE: tl.constexpr, TILE: tl.constexpr,
                 BITS: tl.constexpr, SPLITS: tl.constexpr, ROW_BITS: tl.constexpr):
    """Phase 1 (every chunk), then phase 2 (scan) in the row's last program. With ROW_BITS
    (the plan's ``row_bits``) every program also folds the bits in which its elements differ
    from the row's first into the row's word at ``bits_at``, and the scan turns them into the
    threshold bin's key range when the bin holds the whole row (``_range_in_hist``)."""
    NBINS: tl.constexpr = 1 << BITS
    r = tl.program_id(0).to(tl.int64)
    s = tl.program_id(1)
    start, end, code = _row_window(r, starts_ptr, ends_ptr, next_n, n_cols, DECODE)
    if (s == 0) & (code != 0):
        tl.atomic_max(err_ptr + err_slot, error_word(code, r))
    lo = (start + s * chunk).to(tl.int32)
    hi = tl.minimum(lo + chunk, end).to(tl.int32)
    hist = tl.zeros((NBINS,), dtype=tl.int32)
    differ = tl.zeros((TILE,), dtype=tl.int32)
    row_ptr = logits_ptr + r * stride0
    first = tl.zeros((), dtype=tl.float32)
    if end - start > top_k:
        if ROW_BITS:
            first = tl.load(row_ptr + start * stride1)
        full = _full_tiles_end(lo, hi, TILE)
        for c0 in range(lo, full, TILE):
            hist, differ = _hist_tile(row_ptr, stride1, c0, hi, first, hist, differ, TILE, BITS,
                                      ROW_BITS, True)
        if full < hi:
            hist, differ = _hist_tile(row_ptr, stride1, full, hi, first, hist, differ, TILE, BITS,
                                      ROW_BITS, False)
    row_hist = ws_ptr + r * n_chunks * NBINS
    row_total = sync_ptr + 2 * n_rows + r * NBINS
    row_differ = sync_ptr + bits_at + r
    tl.store(row_hist + s * NBINS + tl.arange(0, NBINS), hist)
    tl.atomic_add(row_total + tl.arange(0, NBINS), hist, sem="relaxed", scope="gpu")
    if ROW_BITS:
        tl.atomic_or(row_differ, tl.reduce(differ, 0, _or), sem="relaxed", scope="gpu")
    if _arrives_last(sync_ptr + r, n_chunks):
        in_bin = _scan_row(row_hist, row_total, ws_ptr + info_at + r * 4,
                           ws_ptr + offs_at + r * n_chunks * 2, end - start, top_k, n_chunks,
                           NBINS, SPLITS)
        if _range_in_hist(in_bin, end - start, ROW_BITS):
            lo_key, hi_key = _row_bits_range(first, tl.load(row_differ, cache_modifier=".cg"))
            keys = (sync_ptr + fin_at + r * fin_words).to(tl.pointer_type(tl.uint32))
            tl.store(keys + 1, lo_key ^ 0xFFFFFFFF)
            tl.store(keys + 2, hi_key)


@triton.jit
def _hist_tile(row_ptr, stride1, c0, hi, first, hist, differ, TILE: tl.constexpr,
               BITS: tl.constexpr, ROW_BITS: tl.constexpr, FULL: tl.constexpr):
    """One tile of the histogram pass (``_coarse_hist``); masked columns read ``first``, so
    that they add no differing bits."""
    cols, v, m = _row_tile(row_ptr, stride1, c0, hi, first, TILE, FULL)
    hist += _masked_hist(_coarse_bin(v, BITS), m, 1 << BITS, FULL)
    if ROW_BITS:
        differ |= v.to(tl.int32, bitcast=True) ^ first.to(tl.int32, bitcast=True)
    return hist, differ


@triton.jit
def _scan_row(row_hist, row_total, info_ptr, offs_ptr, length, top_k, n_chunks,
              NBINS: tl.constexpr, SPLITS: tl.constexpr):
    """Threshold bin b*, the counts above and in it, and every chunk's exclusive offsets;
    returns the count in b*."""
    bins = tl.arange(0, NBINS)
    total = tl.load(row_total + bins, cache_modifier=".cg")
    count = tl.minimum(length, top_k).to(tl.int32)
    greater = tl.sum(total, 0) - tl.cumsum(total, 0)
    hit = (greater < count) & (greater + total >= count)
    b_star = tl.max(tl.where(hit, bins, -1), 0)
    b_star = tl.where(length > top_k, b_star, -1)
    above = tl.sum(tl.where(bins > b_star, total, 0), 0)
    in_bin = tl.sum(tl.where(bins == b_star, total, 0), 0)
    fields = tl.arange(0, 4)
    tl.store(info_ptr + fields, tl.where(fields == 0, b_star, tl.where(fields == 1, above,
                                                                        in_bin)), mask=fields < 3)
    run_above = tl.zeros((), dtype=tl.int32)
    run_in = tl.zeros((), dtype=tl.int32)
    for s0 in range(0, n_chunks, SPLITS):
        ss = s0 + tl.arange(0, SPLITS)
        h = tl.load(row_hist + ss[:, None] * NBINS + bins[None, :], mask=ss[:, None] < n_chunks,
                    other=0, cache_modifier=".cg")
        a = tl.sum(tl.where(bins[None, :] > b_star, h, 0), 1)
        e = tl.sum(tl.where(bins[None, :] == b_star, h, 0), 1)
        tl.store(offs_ptr + ss * 2, run_above + tl.cumsum(a, 0) - a, mask=ss < n_chunks)
        tl.store(offs_ptr + ss * 2 + 1, run_in + tl.cumsum(e, 0) - e, mask=ss < n_chunks)
        run_above += tl.sum(a, 0)
        run_in += tl.sum(e, 0)
    return in_bin


@triton.jit
def _coarse_filter(logits_ptr, starts_ptr, ends_ptr, ws_ptr, sync_ptr, idx_ptr, stride0,
                   stride1, idx_stride0, idx_stride1, next_n, n_cols, top_k, n_rows, n_chunks,
                   chunk, info_at, offs_at, cand_at, cap, fin_at, fin_words, DECODE: tl.constexpr,
                   TILE: tl.constexpr, SMALL_TILE: tl.constexpr, REG_TILE: tl.constexpr,
                   RADIX: tl.constexpr, SLOT_BLOCK: tl.constexpr, BITS: tl.constexpr,
                   SPLIT_FINISH: tl.constexpr, ROW_BITS: tl.constexpr):
    """Phase 3, one program per (row, chunk); unless SPLIT_FINISH (the plan's
    ``split_finish``), the row's last program then finishes a short row (``_finish_short``).
    A row with nothing above its threshold bin and nothing to compact (``_range_before_finish``:
    a tie-heavy row) has nothing to write here: its programs find the bin's key range instead,
    which spares its long-row finish a pass, unless the histogram pass found it
    (``_range_in_hist``: the bin holds the whole row); then they have nothing to do."""
    r = tl.program_id(0).to(tl.int64)
    s = tl.program_id(1)
    start, end, _ = _row_window(r, starts_ptr, ends_ptr, next_n, n_cols, DECODE)
    lo = (start + s * chunk).to(tl.int32)
    hi = tl.minimum(lo + chunk, end).to(tl.int32)
    row_ptr = logits_ptr + r * stride0
    out_ptr = idx_ptr + r * idx_stride0
    info_ptr = ws_ptr + info_at + r * 4
    ckey_ptr = ws_ptr + cand_at + r * cap
    ccol_ptr = ckey_ptr + n_rows * cap
    b_star = tl.load(info_ptr)
    in_bin_count = tl.load(info_ptr + 2)
    from_row = _reads_row(in_bin_count, end - start, cap, REG_TILE)
    if end - start <= top_k:
        for c0 in range(lo, hi, TILE):
            cols, v, m = _row_tile(row_ptr, stride1, c0, hi, 0.0, TILE, False)
            rel = cols - start
            tl.store(out_ptr + rel * idx_stride1, tl.where(v != v, -1, rel).to(tl.int32), mask=m)
    elif _range_before_finish(from_row, info_ptr):
        if _range_in_hist(in_bin_count, end - start, ROW_BITS) == 0:
            lows = tl.full((TILE,), 0xFFFFFFFF, tl.uint32)
            highs = tl.zeros((TILE,), dtype=tl.uint32)
            for c0 in range(lo, hi, TILE):
                cols, v, m = _row_tile(row_ptr, stride1, c0, hi, 0.0, TILE, False)
                in_bin = m & (_coarse_bin(v, BITS) == b_star)
                key = _order_key(v)
                lows = tl.minimum(lows, tl.where(in_bin, key, 0xFFFFFFFF))
                highs = tl.maximum(highs, tl.where(in_bin, key, 0))
            _fold_key_range(sync_ptr + fin_at + r * fin_words, lows, highs)
    else:
        keep = from_row == 0
        run_above = tl.load(ws_ptr + offs_at + (r * n_chunks + s) * 2)
        run_in = tl.load(ws_ptr + offs_at + (r * n_chunks + s) * 2 + 1)
        full = _full_tiles_end(lo, hi, TILE)
        for c0 in range(lo, full, TILE):
            run_above, run_in = _filter_tile(row_ptr, stride1, c0, hi, start, b_star, run_above,
                                             run_in, keep, out_ptr, idx_stride1, ckey_ptr,
                                             ccol_ptr, TILE, BITS, True)
        if full < hi:
            run_above, run_in = _filter_tile(row_ptr, stride1, full, hi, start, b_star,
                                             run_above, run_in, keep, out_ptr, idx_stride1,
                                             ckey_ptr, ccol_ptr, TILE, BITS, False)
    if not SPLIT_FINISH:
        if _arrives_last(sync_ptr + n_rows + r, n_chunks):
            _finish_short(row_ptr + start * stride1, stride1, info_ptr, ckey_ptr, ccol_ptr,
                          out_ptr, idx_stride1, end - start, top_k, cap, SMALL_TILE, REG_TILE,
                          RADIX, SLOT_BLOCK, BITS)


@triton.jit
def _filter_tile(row_ptr, stride1, c0, hi, start, b_star, run_above, run_in, keep, out_ptr,
                 idx_stride1, ckey_ptr, ccol_ptr, TILE: tl.constexpr, BITS: tl.constexpr,
                 FULL: tl.constexpr):
    """One tile of the filter (``_coarse_filter``): the columns above b* go to ``indices``
    after the ``run_above`` before them, those in b* (when ``keep``) to the candidate buffer
    after ``run_in``."""
    cols, v, m = _row_tile(row_ptr, stride1, c0, hi, 0.0, TILE, FULL)
    b = _coarse_bin(v, BITS)
    above = m & (b > b_star)
    in_bin = m & (b == b_star)
    above_rank, in_rank, n_above, n_in = _two_ranks(above, in_bin)
    rel = cols - start.to(tl.int32)
    tl.store(out_ptr + (run_above + above_rank).to(tl.int64) * idx_stride1, rel, mask=above)
    if keep:
        slot = run_in + in_rank
        tl.store(ckey_ptr + slot, _order_key(v).to(tl.int32, bitcast=True), mask=in_bin)
        tl.store(ccol_ptr + slot, rel, mask=in_bin)
    return run_above + n_above, run_in + n_in


@triton.jit
def _release(fin, progress):
    """Publishes a row's progress after every thread's writes (see ``_arrives_last``)."""
    tl.debug_barrier()
    tl.atomic_xchg(fin, progress, sem="release", scope="gpu")


@triton.jit
def _finish_rows(logits_ptr, starts_ptr, ends_ptr, ws_ptr, idx_ptr, stride0, stride1,
                 idx_stride0, idx_stride1, next_n, n_cols, top_k, n_rows, info_at, cand_at, cap,
                 DECODE: tl.constexpr, SMALL_TILE: tl.constexpr, REG_TILE: tl.constexpr,
                 RADIX: tl.constexpr, SLOT_BLOCK: tl.constexpr, BITS: tl.constexpr):
    """The finish of short rows in its own launch (``split_finish``), one program per row;
    long rows are left to ``_finish_long``."""
    r = tl.program_id(0).to(tl.int64)
    start, end, _ = _row_window(r, starts_ptr, ends_ptr, next_n, n_cols, DECODE)
    ckey_ptr = ws_ptr + cand_at + r * cap
    _finish_short(logits_ptr + r * stride0 + start * stride1, stride1, ws_ptr + info_at + r * 4,
                  ckey_ptr, ckey_ptr + n_rows * cap, idx_ptr + r * idx_stride0, idx_stride1,
                  end - start, top_k, cap, SMALL_TILE, REG_TILE, RADIX, SLOT_BLOCK, BITS)


@triton.jit
def _finish_long(logits_ptr, starts_ptr, ends_ptr, ws_ptr, sync_ptr, idx_ptr, stride0, stride1,
                 idx_stride0, idx_stride1, next_n, n_cols, top_k, n_rows, info_at, cand_at, cap,
                 state_at, counts_at, fin_at, fin_words, slices, DECODE: tl.constexpr,
                 TILE: tl.constexpr, REG_TILE: tl.constexpr, RADIX: tl.constexpr,
                 SLOT_BLOCK: tl.constexpr, BITS: tl.constexpr, MAX_SLICES: tl.constexpr,
                 SLEEP: tl.constexpr):
    """The finish of long rows (more than REG_TILE candidates), after the filter launch:
    ``slices`` programs per row; a program of a short row leaves after two loads. The others
    take the row's work items (stage, slice), stages slowest, by ticket until none is left, so
    a program only ever waits for items of lower tickets, which programs already running hold
    (and under the interpreter, where programs run one after another, the row's first program
    takes them all). An item waits until the row's progress word reaches its stage, and has
    nothing to do if the row went past it (a search that stopped early)."""
    LEVELS: tl.constexpr = (32 + RADIX - 1) // RADIX
    ITEMS: tl.constexpr = LEVELS + 3
    r = (tl.program_id(0) // slices).to(tl.int64)
    start, end, _ = _row_window(r, starts_ptr, ends_ptr, next_n, n_cols, DECODE)
    info_ptr = ws_ptr + info_at + r * 4
    in_bin = tl.load(info_ptr + 2)
    length = end - start
    from_row, n, long_row = _finish_source(in_bin, length, top_k, cap, REG_TILE)
    if long_row:
        fin = sync_ptr + fin_at + r * fin_words
        n_cand = n.to(tl.int32)
        per = tl.cdiv(tl.cdiv(n_cand, slices), TILE) * TILE
        ckey_ptr = ws_ptr + cand_at + r * cap
        item = tl.atomic_add(fin + 3, 1, sem="relaxed", scope="gpu")
        while item < ITEMS * slices:
            stage = item // slices
            g = item % slices
            if _wait_for(fin, stage, SLEEP) == stage:
                _finish_stage(stage, g, slices, g * per, tl.minimum(g * per + per, n_cand),
                              logits_ptr + r * stride0 + start * stride1, stride1, info_ptr,
                              ckey_ptr, ckey_ptr + n_rows * cap, idx_ptr + r * idx_stride0,
                              idx_stride1, fin, ws_ptr + state_at + r * 4,
                              ws_ptr + counts_at + r * slices * (2 + LEVELS * (1 << RADIX)),
                              tl.minimum(length, top_k), top_k, from_row, TILE, RADIX,
                              SLOT_BLOCK, BITS, MAX_SLICES)
            item = tl.atomic_add(fin + 3, 1, sem="relaxed", scope="gpu")


@triton.jit
def _wait_for(fin, progress, SLEEP: tl.constexpr):
    """Spins on plain loads (no read-modify-write traffic on the word the last program of a
    stage must update), pausing between them on the GPU (SLEEP) so that waiting programs leave
    the SM to the working ones, until the row's progress reaches ``progress``; then acquires."""
    seen = tl.load(fin, volatile=True)
    while seen < progress:
        if SLEEP:
            seen = tl.inline_asm_elementwise("nanosleep.u32 256;\n ld.volatile.global.b32 $0, [$1];",
                                             "=r,l", [fin], dtype=tl.int32, is_pure=False, pack=1)
        else:
            seen = tl.load(fin, volatile=True)
    seen = tl.atomic_add(fin, 0, sem="acquire", scope="gpu")
    tl.debug_barrier()
    return seen


@triton.jit
def _finish_stage(stage, g, slices, lo, hi, row_ptr, stride1, info_ptr, ckey_ptr, ccol_ptr,
                  out_ptr, idx_stride1, fin, state_ptr, counts_ptr, count, top_k, from_row,
                  TILE: tl.constexpr, RADIX: tl.constexpr, SLOT_BLOCK: tl.constexpr,
                  BITS: tl.constexpr, MAX_SLICES: tl.constexpr):
    """One slice [lo, hi) of a long row's candidates in one stage; the stage's last program
    publishes the next stage. Range (stage 0): the slice's lowest and highest key; the last
    program sets the search state at the candidates' common key prefix. Digit stages: the
    slice's histogram of the next digit among the candidates sharing the prefix (kept per
    slice); the last program picks the digit. Count stage, only when no digit stage ran: the
    slice's candidates above and equal to the common prefix. Write stage: the slice writes its
    taken candidates at the offsets that the counts of the slices before it give (from their
    digit histograms, or from the count stage), so the output is the same for any number of
    slices."""
    LEVELS: tl.constexpr = (32 + RADIX - 1) // RADIX
    NB: tl.constexpr = 1 << RADIX
    slice_hists = counts_ptr + slices * 2
    b_star = tl.load(info_ptr, cache_modifier=".cg")
    arrivals = fin + 4 + stage
    if stage == 0:
        if not _range_before_finish(from_row, info_ptr):
            lows = tl.full((TILE,), 0xFFFFFFFF, tl.uint32)
            highs = tl.zeros((TILE,), dtype=tl.uint32)
            for t0 in range(lo, hi, TILE):
                key, col, m = _candidates(row_ptr, stride1, ckey_ptr, ccol_ptr, t0, hi, b_star,
                                          0, 0, from_row, TILE, BITS, False)
                lows = tl.minimum(lows, tl.where(m, key, 0xFFFFFFFF))
                highs = tl.maximum(highs, tl.where(m, key, 0))
            _fold_key_range(fin, lows, highs)
        if _arrives_last(arrivals, slices):
            lo_key, hi_key = _key_range(fin)
            shift, prefix = _start_digit(lo_key, hi_key, RADIX)
            k_rem = count.to(tl.int32) - tl.load(info_ptr + 1, cache_modifier=".cg")
            _set_state(state_ptr, shift, prefix, k_rem)
            tl.store(state_ptr + 3, shift)
            searching = (tl.load(info_ptr + 2, cache_modifier=".cg") != k_rem) & (shift > 0)
            _release(fin, tl.where(searching, 1, LEVELS + 1))
    else:
        lo_key, hi_key = _key_range(fin)
        shift = tl.load(state_ptr, cache_modifier=".cg")
        prefix = tl.load(state_ptr + 1, cache_modifier=".cg").to(tl.uint32, bitcast=True)
        k_rem = tl.load(state_ptr + 2, cache_modifier=".cg")
        if stage <= LEVELS:
            shift -= RADIX
            p_lo, p_hi = _prefix_bounds(prefix, shift + RADIX)
            p_lo, p_hi = tl.maximum(lo_key, p_lo), tl.minimum(hi_key, p_hi)
            hist = tl.zeros((NB,), dtype=tl.int32)
            full = _full_tiles_end(lo, hi, TILE)
            for t0 in range(lo, full, TILE):
                key, col, m = _candidates(row_ptr, stride1, ckey_ptr, ccol_ptr, t0, hi, b_star,
                                          p_lo, p_hi, from_row, TILE, 0, True)
                hist += _digit_hist(key, m, shift, RADIX)
            if full < hi:
                key, col, m = _candidates(row_ptr, stride1, ckey_ptr, ccol_ptr, full, hi, b_star,
                                          p_lo, p_hi, from_row, TILE, 0, False)
                hist += _digit_hist(key, m, shift, RADIX)
            bins = tl.arange(0, NB)
            tl.store(slice_hists + ((stage - 1) * slices + g) * NB + bins, hist)
            row_hist = fin + 4 + LEVELS + 3 + (stage - 1) * NB + bins
            tl.atomic_add(row_hist, hist, sem="relaxed", scope="gpu")
            if _arrives_last(arrivals, slices):
                prefix, k_rem, searching = _pick_digit(tl.load(row_hist, cache_modifier=".cg"),
                                                       shift, prefix, k_rem, RADIX)
                _set_state(state_ptr, shift, prefix, k_rem)
                _release(fin, tl.where(searching, stage + 1, LEVELS + 2))
        elif stage == LEVELS + 1:
            above = tl.zeros((), dtype=tl.int32)
            equal = tl.zeros((), dtype=tl.int32)
            for t0 in range(lo, hi, TILE):
                key, col, m = _candidates(row_ptr, stride1, ckey_ptr, ccol_ptr, t0, hi, b_star,
                                          lo_key, hi_key, from_row, TILE, 0, False)
                top = _key_top(key, shift)
                above += tl.sum((m & (top > prefix)).to(tl.int32), 0)
                equal += tl.sum((m & (top == prefix)).to(tl.int32), 0)
            tl.store(counts_ptr + g * 2, above)
            tl.store(counts_ptr + g * 2 + 1, equal)
            if _arrives_last(arrivals, slices):
                _release(fin, LEVELS + 2)
        else:
            _write_slice(g, slices, lo, hi, row_ptr, stride1, info_ptr, ckey_ptr, ccol_ptr,
                         out_ptr, idx_stride1, state_ptr, counts_ptr, shift, prefix, k_rem, lo_key,
                         hi_key, count, top_k, from_row, TILE, RADIX, SLOT_BLOCK, MAX_SLICES)


@triton.jit
def _set_state(state_ptr, shift, prefix, k_rem):
    tl.store(state_ptr, shift)
    tl.store(state_ptr + 1, prefix.to(tl.int32, bitcast=True))
    tl.store(state_ptr + 2, k_rem)


@triton.jit
def _write_slice(g, slices, lo, hi, row_ptr, stride1, info_ptr, ckey_ptr, ccol_ptr, out_ptr,
                 idx_stride1, state_ptr, counts_ptr, shift, prefix, k_rem, lo_key, hi_key, count,
                 top_k, from_row, TILE: tl.constexpr, RADIX: tl.constexpr,
                 SLOT_BLOCK: tl.constexpr, MAX_SLICES: tl.constexpr):
    """The write stage of slice g: its taken candidates, after those of the slices before it."""
    NB: tl.constexpr = 1 << RADIX
    before = tl.arange(0, MAX_SLICES)
    levels_run = (tl.load(state_ptr + 3, cache_modifier=".cg") - shift) // RADIX
    if levels_run == 0:
        a = tl.load(counts_ptr + before * 2, mask=before < g, other=0, cache_modifier=".cg")
        e = tl.load(counts_ptr + before * 2 + 1, mask=before < g, other=0, cache_modifier=".cg")
    else:
        a = tl.zeros((MAX_SLICES,), dtype=tl.int32)
        e = tl.zeros((MAX_SLICES,), dtype=tl.int32)
        bins = tl.arange(0, NB)
        for level in range(0, levels_run):
            digit = ((prefix >> (RADIX * (levels_run - 1 - level))) & (NB - 1)).to(tl.int32)
            h = tl.load(counts_ptr + slices * 2 + (level * slices + before[:, None]) * NB
                        + bins[None, :], mask=before[:, None] < g, other=0, cache_modifier=".cg")
            a += tl.sum(tl.where(bins[None, :] > digit, h, 0), 1)
            e = tl.sum(tl.where(bins[None, :] == digit, h, 0), 1)
    e_before = tl.cumsum(e, 0) - e
    taken = a + tl.minimum(tl.maximum(k_rem - e_before, 0), e)
    taken = tl.load(info_ptr + 1, cache_modifier=".cg") + tl.sum(taken, 0)
    eq_seen = tl.sum(e, 0)
    full = _full_tiles_end(lo, hi, TILE)
    for t0 in range(lo, full, TILE):
        key, col, m = _candidates(row_ptr, stride1, ckey_ptr, ccol_ptr, t0, hi, 0, lo_key, hi_key,
                                  from_row, TILE, 0, True)
        taken, eq_seen = _write_taken(key, col, m, shift, prefix, k_rem, taken, eq_seen, out_ptr,
                                      idx_stride1)
    if full < hi:
        key, col, m = _candidates(row_ptr, stride1, ckey_ptr, ccol_ptr, full, hi, 0, lo_key,
                                  hi_key, from_row, TILE, 0, False)
        _write_taken(key, col, m, shift, prefix, k_rem, taken, eq_seen, out_ptr, idx_stride1)
    if g == 0:
        _fill_unused(out_ptr, idx_stride1, count, top_k, SLOT_BLOCK)


@triton.jit
def _candidates(row_ptr, stride1, ckey_ptr, ccol_ptr, base, n, b_star, lo_key, hi_key, from_row,
                TILE: tl.constexpr, BITS: tl.constexpr, FULL: tl.constexpr):
    """Order keys, local offsets and validity of candidates [base, base + TILE) below n: the
    compacted buffer, or (from_row) the row's elements in the threshold bin b*: by their coarse
    bin (BITS > 0) or, once the bin's key range is known (BITS = 0), by their key in [lo_key,
    hi_key], the same elements at a lower cost (the coarse bin is a monotone function of the
    key, so no element outside the bin lies between two inside it). With BITS = 0 the buffer's
    candidates are held to [lo_key, hi_key] too, so that a caller may narrow it (a digit
    stage: to the keys sharing the search's prefix). A FULL tile (all of it below n) loads
    without a mask."""
    if from_row:
        i, v, m = _row_tile(row_ptr, stride1, base, n, 0.0, TILE, FULL)
        key = _order_key(v)
        if BITS > 0:
            m = m & (_coarse_bin(v, BITS) == b_star)
        col = i
    else:
        i = base + tl.arange(0, TILE)
        if FULL:
            m = tl.full((TILE,), 1, tl.int1)
            key = tl.load(ckey_ptr + i, cache_modifier=".cg")
            col = tl.load(ccol_ptr + i, cache_modifier=".cg")
        else:
            m = i < n
            key = tl.load(ckey_ptr + i, mask=m, other=0, cache_modifier=".cg")
            col = tl.load(ccol_ptr + i, mask=m, other=0, cache_modifier=".cg")
        key = key.to(tl.uint32, bitcast=True)
    if BITS == 0:
        m = m & (key >= lo_key) & (key <= hi_key)
    return key, col, m


@triton.jit
def _start_digit(lo_key, hi_key, RADIX: tl.constexpr):
    """Lowest multiple of RADIX at and above which every candidate key agrees, and the agreed
    prefix: digits above it would put every candidate in one bin. Digits sit at multiples of
    RADIX, so a RADIX that does not divide 32 has a narrower top digit (5: bits 30-31)."""
    differ = lo_key ^ hi_key
    shift = RADIX * ((32 + RADIX - 1) // RADIX)
    while (shift > 0) & ((differ >> (shift - RADIX)) == 0):
        shift -= RADIX
    return shift, _key_top(hi_key, shift)


@triton.jit
def _key_top(key, shift):
    """The bits of ``key`` from ``shift`` up (0 for shift 32 and above)."""
    top = tl.where(shift == 0, key, (key >> 1) >> tl.minimum(tl.maximum(shift - 1, 0), 31))
    return tl.where(shift >= 32, 0, top)


@triton.jit
def _prefix_bounds(prefix, shift):
    """The lowest and highest key whose bits from ``shift`` up are ``prefix`` (every key for
    shift 32 and above): one pair of comparisons tests a key for the prefix."""
    low = tl.where(shift >= 32, 0, prefix << tl.minimum(shift, 31).to(tl.uint32))
    below = tl.where(shift >= 32, 0xFFFFFFFF,
                     (tl.full((), 1, tl.uint32) << tl.minimum(shift, 31).to(tl.uint32)) - 1)
    return low.to(tl.uint32), (low | below).to(tl.uint32)


@triton.jit
def _digit_hist(key, m, shift, RADIX: tl.constexpr):
    """Histogram of the digit at ``shift`` of the keys in ``m`` (which the caller holds to the
    search's prefix)."""
    digit = ((key >> shift) & ((1 << RADIX) - 1)).to(tl.int32)
    return tl.histogram(digit, 1 << RADIX, mask=m)


@triton.jit
def _pick_digit(hist, shift, prefix, k_rem, RADIX: tl.constexpr):
    """The digit holding the k_rem-th largest key; returns the longer prefix, the count still
    needed inside it, and whether to go on (not all of it needed, bits left)."""
    bins = tl.arange(0, 1 << RADIX)
    greater = tl.sum(hist, 0) - tl.cumsum(hist, 0)
    hit = (greater < k_rem) & (greater + hist >= k_rem)
    b = tl.max(tl.where(hit, bins, -1), 0)
    k_rem -= tl.sum(tl.where(bins == b, greater, 0), 0)
    prefix = (prefix << RADIX) | b.to(tl.uint32)
    searching = (shift > 0) & (tl.sum(tl.where(bins == b, hist, 0), 0) != k_rem)
    return prefix, k_rem, searching


@triton.jit
def _write_taken(key, col, m, shift, prefix, k_rem, taken, eq_seen, out_ptr, idx_stride1):
    """Writes every candidate above the prefix and the first k_rem equal to it (column order),
    after ``taken`` slots, ``eq_seen`` equal ones having gone before: a candidate's slot is
    ``taken`` plus those above before it plus the equal ones before it that were taken,
    min(equal before, k_rem) - min(eq_seen, k_rem)."""
    top = _key_top(key, shift)
    above = m & (top > prefix)
    eq = m & (top == prefix)
    above_rank, eq_rank, n_above, n_eq = _two_ranks(above, eq)
    eq_rank += eq_seen
    skipped = tl.minimum(eq_seen, k_rem)
    pos = taken + above_rank + tl.minimum(eq_rank, k_rem) - skipped
    take = above | (eq & (eq_rank < k_rem))
    tl.store(out_ptr + pos.to(tl.int64) * idx_stride1, tl.where(key == NAN_KEY, -1, col),
             mask=take)
    eq_seen += n_eq
    return taken + n_above + tl.minimum(eq_seen, k_rem) - skipped, eq_seen



@triton.jit
def _select_in_registers(row_ptr, stride1, ckey_ptr, ccol_ptr, n, b_star, from_row, in_bin,
                         k_rem, taken, out_ptr, idx_stride1, TILE: tl.constexpr,
                         RADIX: tl.constexpr, BITS: tl.constexpr):
    """The finishing select for at most TILE candidates, read once and kept in registers."""
    key, col, m = _candidates(row_ptr, stride1, ckey_ptr, ccol_ptr, tl.zeros((), tl.int32), n,
                              b_star, 0, 0, from_row, TILE, BITS, False)
    shift, prefix = _start_digit(tl.min(tl.where(m, key, 0xFFFFFFFF), 0),
                                 tl.max(tl.where(m, key, 0), 0), RADIX)
    searching = (in_bin != k_rem) & (shift > 0)
    while searching:
        shift -= RADIX
        p_lo, p_hi = _prefix_bounds(prefix, shift + RADIX)
        in_prefix = m & (key >= p_lo) & (key <= p_hi)
        prefix, k_rem, searching = _pick_digit(_digit_hist(key, in_prefix, shift, RADIX), shift,
                                               prefix, k_rem, RADIX)
    _write_taken(key, col, m, shift, prefix, k_rem, taken, tl.zeros((), dtype=tl.int32), out_ptr,
                 idx_stride1)


@triton.jit
def _finish_short(row_ptr, stride1, info_ptr, ckey_ptr, ccol_ptr, out_ptr, idx_stride1, length,
                  top_k, cap, SMALL_TILE: tl.constexpr, REG_TILE: tl.constexpr,
                  RADIX: tl.constexpr, SLOT_BLOCK: tl.constexpr, BITS: tl.constexpr):
    """The whole finish of a short row, one with at most REG_TILE candidates (the plan's
    reg_tile): they are read once and kept in registers, then -1 goes in the unused slots. A
    long row is left as it is, for ``_finish_long``."""
    count = tl.minimum(length, top_k)
    b_star = tl.load(info_ptr, cache_modifier=".cg")
    taken = tl.load(info_ptr + 1, cache_modifier=".cg")
    in_bin = tl.load(info_ptr + 2, cache_modifier=".cg")
    from_row, n, long_row = _finish_source(in_bin, length, top_k, cap, REG_TILE)
    if long_row == 0:
        if length > top_k:
            k_rem = count.to(tl.int32) - taken
            if n <= SMALL_TILE:
                _select_in_registers(row_ptr, stride1, ckey_ptr, ccol_ptr, n, b_star, from_row,
                                     in_bin, k_rem, taken, out_ptr, idx_stride1, SMALL_TILE,
                                     RADIX, BITS)
            else:
                _select_in_registers(row_ptr, stride1, ckey_ptr, ccol_ptr, n, b_star, from_row,
                                     in_bin, k_rem, taken, out_ptr, idx_stride1, REG_TILE,
                                     RADIX, BITS)
        _fill_unused(out_ptr, idx_stride1, count, top_k, SLOT_BLOCK)


@triton.jit
def _fill_unused(out_ptr, idx_stride1, count, top_k, SLOT_BLOCK: tl.constexpr):
    slots = tl.arange(0, SLOT_BLOCK)
    for s0 in range(0, top_k, SLOT_BLOCK):
        s = s0 + slots
        tl.store(out_ptr + s.to(tl.int64) * idx_stride1, tl.full((SLOT_BLOCK,), -1, tl.int32),
                 mask=(s >= count) & (s < top_k))


def coarse_bits(top_k: int, n_cols: int, plan: LaunchPlan = DEFAULT_PLAN) -> int:
    """Bits of the coarse bin: 64 bins (one per octave) when the k-th value sits in the sparse
    tail, 128 (half octaves) when k is a large share of the row, where a one-octave bin would
    hold too many candidates. No more bins than that, because tl.histogram's cost grows with the
    bin count (docs/kernels/topk.md has the measurements)."""
    if plan.coarse_bits is not None:
        return plan.coarse_bits
    return 7 if top_k * 16 > n_cols else 6


def chunk_size(num_rows: int, n_cols: int, plan: LaunchPlan = DEFAULT_PLAN) -> int:
    """Columns per program: enough programs to fill the GPU, at most ``max_chunk`` each."""
    want = cdiv(num_rows * max(n_cols, 1), plan.target_programs)
    return min(plan.max_chunk, max(plan.hist_tile, plan.filter_tile,
                                   next_power_of_2(want)))


MAX_SLICES = 64


def finish_slices(num_rows: int, n_cols: int, plan: LaunchPlan = DEFAULT_PLAN) -> int:
    """Programs per row in each stage of a long row's finish: about ``finish_programs`` in all,
    none with fewer than ``slice_min`` columns' worth of candidates, at most MAX_SLICES."""
    return max(1, min(MAX_SLICES, plan.finish_programs // num_rows, n_cols // plan.slice_min))


def launch(logits, starts, ends, next_n, indices, num_rows, stride0, stride1, top_k,
           decode: bool, plan: LaunchPlan = DEFAULT_PLAN, errors=None) -> None:
    """All launches, no synchronisation. ``errors`` = (words, index): where the worst window
    error goes, packed as ``deferred.pack(code, row)`` (a scratch word when None). The sync
    words (zeroed here) are the row counters of the histogram and filter launches, every row's
    total coarse histogram, then every row's finish words: progress, ~lowest and highest
    candidate key, the work ticket, one arrival counter per stage, one digit histogram per
    digit stage; last, every row's bits that differ from its first value's. Long rows (more than
    ``reg_tile`` columns) get ``finish_slices`` programs per finish stage, or one program for
    all stages; short ones one program."""
    dev, n_cols = logits.device, logits.shape[1]
    top_k, next_n = int(top_k), int(next_n)
    go = _launches(num_rows, n_cols, top_k, decode, plan)
    ws = torch.empty(go.ws_words, dtype=torch.int32, device=dev)
    sync = torch.zeros(go.sync_words, dtype=torch.int32, device=dev)
    words, slot = errors if errors is not None else (torch.zeros(1, dtype=torch.int32, device=dev), 0)
    rows = (logits, starts, ends, ws)
    strides = (stride0, stride1, indices.stride(0), indices.stride(1), next_n, n_cols, top_k,
               num_rows)
    go.hist(*rows, sync, words, slot, stride0, stride1, next_n, n_cols, top_k, num_rows)
    go.filter(*rows, sync, indices, *strides)
    if go.finish_rows is not None:
        go.finish_rows(*rows, indices, *strides)
    if go.finish_long is not None:
        go.finish_long(*rows, sync, indices, *strides)


@dataclasses.dataclass(frozen=True, eq=False)
class _Launches:
    """``launch``'s scratch sizes and kernel launches as its shape and plan fix them (the layout
    of ``_layout`` as each kernel's trailing arguments); None: the kernel does not run."""
    ws_words: int
    sync_words: int
    hist: Launch
    filter: Launch
    finish_rows: Launch | None
    finish_long: Launch | None


@functools.lru_cache(maxsize=1024)
def _launches(num_rows: int, n_cols: int, top_k: int, decode: bool,
              plan: LaunchPlan) -> _Launches:
    (chunk, n_chunks, cap, bits, slices, info_at, offs_at, state_at, counts_at, cand_at,
     ws_words, fin_at, fin_words, bits_at) = _layout(num_rows, n_cols, top_k, plan)
    grid = (num_rows, n_chunks)
    select = dict(REG_TILE=plan.reg_tile, RADIX=plan.radix, SLOT_BLOCK=plan.slot_block,
                  BITS=bits, DECODE=decode)
    return _Launches(
        ws_words, bits_at + num_rows,
        Launch(_coarse_hist, grid, (n_chunks, chunk, info_at, offs_at, fin_at, fin_words, bits_at),
               dict(DECODE=decode, TILE=plan.hist_tile, BITS=bits, SPLITS=plan.scan_splits,
                    ROW_BITS=plan.row_bits, num_warps=plan.hist_warps)),
        Launch(_coarse_filter, grid,
               (n_chunks, chunk, info_at, offs_at, cand_at, cap, fin_at, fin_words),
               dict(TILE=plan.filter_tile, SMALL_TILE=plan.small_tile,
                    SPLIT_FINISH=plan.split_finish, ROW_BITS=plan.row_bits, **select,
                    num_warps=plan.filter_warps, **_regs(plan.filter_regs))),
        Launch(_finish_rows, (num_rows,), (info_at, cand_at, cap),
               dict(SMALL_TILE=plan.small_tile, **select, num_warps=plan.finish_warps))
        if plan.split_finish else None,
        Launch(_finish_long, (num_rows * slices,),
               (info_at, cand_at, cap, state_at, counts_at, fin_at, fin_words, slices),
               dict(TILE=plan.finish_tile, MAX_SLICES=MAX_SLICES, SLEEP=not triton_interpreted(),
                    **select, num_warps=plan.long_warps))
        if n_cols > plan.reg_tile else None)


@functools.lru_cache(maxsize=1024)
def _layout(num_rows: int, n_cols: int, top_k: int, plan: LaunchPlan) -> tuple:
    """The launch geometry and the scratch layout of ``launch`` (see its docstring), computed
    once per shape and plan."""
    chunk = chunk_size(num_rows, n_cols, plan)
    n_chunks = max(1, cdiv(n_cols, chunk))
    cap = max(1, min(n_cols, plan.candidate_budget // num_rows))
    bits = coarse_bits(top_k, n_cols, plan)
    nbins = 1 << bits
    levels = cdiv(32, plan.radix)
    slices = finish_slices(num_rows, n_cols, plan)
    info_at = num_rows * n_chunks * nbins
    offs_at = info_at + num_rows * 4
    state_at = offs_at + num_rows * n_chunks * 2
    counts_at = state_at + num_rows * 4
    cand_at = counts_at + num_rows * slices * (2 + levels * (1 << plan.radix))
    fin_at = 2 * num_rows + num_rows * nbins
    fin_words = 4 + levels + 3 + levels * (1 << plan.radix)
    bits_at = fin_at + num_rows * fin_words
    return (chunk, n_chunks, cap, bits, slices, info_at, offs_at, state_at, counts_at, cand_at,
            cand_at + 2 * num_rows * cap, fin_at, fin_words, bits_at)


def _regs(cap: int | None) -> dict:
    """The launch option capping a kernel's registers per thread, when the plan sets one."""
    return {"maxnreg": cap} if cap else {}


def _window_errors(logits, op: str, starts_name: str) -> tuple:
    """The error word of one call (``kernels.runtime.deferred``) and its message."""
    explain = _window_explainer(op, starts_name, logits.shape[1])
    return deferred.claim(logits.device, explain), explain


@functools.lru_cache(maxsize=256)
def _window_explainer(op: str, starts_name: str, n: int):
    what = {1: "row_ends < row_starts" if starts_name else "the window ends before it starts",
            2: f"{starts_name or 'the window start'} < 0",
            3: "the window needs columns beyond the {n} logits columns"}
    return deferred.explainer({code: f"{op}: row {{row}}: {text}" for code, text in what.items()},
                              section=2, n=n)


@register("top_k_per_row_prefill", "triton", **_HERE,
          batch_invariant=True, knobs={"plan": PLANS})
def top_k_per_row_prefill(logits, row_starts, row_ends, indices, num_rows, stride0, stride1,
                          top_k, plan: LaunchPlan = DEFAULT_PLAN):
    args = (logits, row_starts, row_ends, indices, num_rows, stride0, stride1, top_k)
    validate.check_prefill_args(*args)
    if int(num_rows) == 0:
        return
    errors, explain = _window_errors(logits, "top_k_per_row_prefill", "row_starts")
    launch(logits, row_starts.contiguous(), row_ends.contiguous(), 1, indices, int(num_rows),
           stride0, stride1, top_k, decode=False, plan=plan, errors=errors)
    deferred.launched(*errors, explain)


@register("top_k_per_row_decode", "triton", **_HERE,
          batch_invariant=True, knobs={"plan": PLANS})
def top_k_per_row_decode(logits, next_n, seq_lens, indices, num_rows, stride0, stride1, top_k,
                         plan: LaunchPlan = DEFAULT_PLAN):
    args = (logits, next_n, seq_lens, indices, num_rows, stride0, stride1, top_k)
    validate.check_decode_args(*args)
    if int(num_rows) == 0:
        return
    flat = seq_lens.dim() == 2
    errors, explain = _window_errors(logits, "top_k_per_row_decode", "")
    launch(logits, None, seq_lens.reshape(-1).contiguous(), 1 if flat else next_n, indices,
           int(num_rows), stride0, stride1, top_k, decode=True, plan=plan, errors=errors)
    deferred.launched(*errors, explain)
