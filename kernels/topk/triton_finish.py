"""The finish of Triton top-k, the last launches of ``kernels.topk.triton``: an exact radix
select (the plan's ``radix`` bits a digit) of the ``k - above`` slots the coarse pass left,
among the candidates of the threshold bin, then -1 in the unused slots.

A short row (at most ``reg_tile`` candidates) is selected by one program in registers
(``_finish_rows``, or ``_finish_short`` from the filter launch); a long row by several programs
whose stages (key range, one per digit, count, write) are chained by ticket counters, so that a
program only waits for work that running programs hold (``_finish_long``).
"""

from __future__ import annotations

import triton
import triton.language as tl

from kernels.topk.triton_row import (NAN_KEY, _arrives_last, _coarse_bin, _fold_key_range,
                                     _full_tiles_end, _order_key, _range_before_finish, _reads_row,
                                     _row_tile, _row_window, _two_ranks)


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
def _finish_source(in_bin, length, top_k, cap, REG_TILE: tl.constexpr):
    """Where a row's finish reads its candidates (``_reads_row``), how many it reads, and
    whether the row is long (a select among more than REG_TILE of them: ``_finish_long``)."""
    from_row = _reads_row(in_bin, length, cap, REG_TILE)
    n = tl.where(from_row, length, in_bin)
    return from_row, n, (length > top_k) & (n > REG_TILE)


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
def _fill_unused(out_ptr, idx_stride1, count, top_k, SLOT_BLOCK: tl.constexpr):
    slots = tl.arange(0, SLOT_BLOCK)
    for s0 in range(0, top_k, SLOT_BLOCK):
        s = s0 + slots
        tl.store(out_ptr + s.to(tl.int64) * idx_stride1, tl.full((SLOT_BLOCK,), -1, tl.int32),
                 mask=(s >= count) & (s < top_k))


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
def _release(fin, progress):
    """Publishes a row's progress after every thread's writes (see ``_arrives_last``)."""
    tl.debug_barrier()
    tl.atomic_xchg(fin, progress, sem="release", scope="gpu")


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
def _key_range(fin):
    """The row's lowest and highest candidate key, once every program has folded its own."""
    keys = fin.to(tl.pointer_type(tl.uint32))
    return (tl.load(keys + 1, cache_modifier=".cg") ^ 0xFFFFFFFF,
            tl.load(keys + 2, cache_modifier=".cg"))


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
