"""The coarse pass of Triton top-k, the first two launches of ``kernels.topk.triton``.

``_coarse_hist``: per chunk of a row, a histogram over the coarse bin; the row's last program
finds the threshold bin b* that holds the k-th largest element and gives every chunk its
offsets. ``_coarse_filter``: every element above b* goes straight into ``indices``, those in
b* into the candidate buffer (unless the finish reads the row itself); with the plan's
``split_finish`` False its last program of a row also finishes a short one (``_finish_short``).
"""

from __future__ import annotations

import triton
import triton.language as tl

from kernels.runtime.triton_utils import error_word
from kernels.topk.triton_finish import _finish_short
from kernels.topk.triton_row import (_arrives_last, _coarse_bin, _fold_key_range, _full_tiles_end,
                                     _key_of_bits, _or, _order_key, _range_before_finish, _reads_row,
                                     _row_tile, _row_window, _two_ranks)


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
def _masked_hist(x, m, NBINS: tl.constexpr, FULL: tl.constexpr):
    """tl.histogram of x where m; a full tile needs no mask (one ballot less an element)."""
    if FULL:
        return tl.histogram(x, NBINS)
    return tl.histogram(x, NBINS, mask=m)


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
