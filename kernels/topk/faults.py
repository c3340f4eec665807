"""Seeded faults of top-k per row: the two bugs vLLM PR 42810 fixed, and their neighbours."""

from __future__ import annotations

import torch

from harness.core.detectors import CALL_SEQUENCE, LAYOUTS
from harness.core.faults import SeededFaults
from kernels.topk.probes import TOPK_CHECKS, TOPK_MIXED_ROWS, TOPK_PAST_2_31
from harness.core.registry import Implementation
from kernels.topk import torch as ref
from kernels.topk.validate import decode_row_ends

FAULTS = SeededFaults()


def _impl(op, name, fn) -> Implementation:
    return Implementation(op=op, name=name, fn=fn, source=__name__)


def _rows(logits, num_rows, stride0, stride1) -> torch.Tensor:
    """The ``num_rows`` logits rows as the call's strides lay them out."""
    return logits.as_strided((int(num_rows), logits.shape[1]), (stride0, stride1))


def _select_from_zero(view, ends, indices, top_k) -> None:
    """Each row's top-k of its columns ``[0, ends[r])`` into ``indices``, as the reference does."""
    ref.select_into(view, torch.zeros_like(ends), ends, indices, int(top_k))


@FAULTS.seed("global_offsets", "top_k_per_row_prefill", "index contract", TOPK_CHECKS)
def global_offsets(threshold: int) -> Implementation:
    """Returns global column numbers instead of offsets from row_starts."""
    def prefill(logits, row_starts, row_ends, indices, num_rows, stride0, stride1, top_k):
        ref.top_k_per_row_prefill(logits, row_starts, row_ends, indices, num_rows, stride0,
                                  stride1, top_k)
        block = indices[:num_rows, :top_k]
        block.copy_(torch.where(block >= 0, block + row_starts[:num_rows, None], block))
    return _impl("top_k_per_row_prefill", "fault-global-offsets", prefill)


@FAULTS.seed("stale_instead_of_minus_one", "top_k_per_row_decode", "index contract", TOPK_CHECKS)
def stale_slots(threshold: int) -> Implementation:
    """Writes the selected offsets but never the -1 padding (slots keep what was there)."""
    def decode(logits, next_n, seq_lens, indices, num_rows, stride0, stride1, top_k):
        scratch = torch.empty_like(indices)
        ref.top_k_per_row_decode(logits, next_n, seq_lens, scratch, num_rows, stride0, stride1,
                                 top_k)
        block = indices[:num_rows, :top_k]
        new = scratch[:num_rows, :top_k]
        block.copy_(torch.where(new >= 0, new, block))
    return _impl("top_k_per_row_decode", "fault-stale-instead-of-minus-one", decode)


@FAULTS.seed("writes_row_past_slice", "top_k_per_row_decode", "out-of-bounds write", TOPK_CHECKS)
def writes_row_past_slice(threshold: int) -> Implementation:
    """Sized by the padded row count of the buffer instead of num_rows: clears one row beyond
    the rows it owns (the PR 42810 decode-slice class)."""
    def decode(logits, next_n, seq_lens, indices, num_rows, stride0, stride1, top_k):
        ref.top_k_per_row_decode(logits, next_n, seq_lens, indices, num_rows, stride0, stride1,
                                 top_k)
        flat = indices.as_strided((num_rows + 1, top_k), indices.stride(),
                                  indices.storage_offset())
        flat[num_rows].fill_(-1)
    return _impl("top_k_per_row_decode", "fault-writes-row-past-slice", decode)


@FAULTS.seed("decode_window_off_by_one", "top_k_per_row_decode", "index contract", TOPK_CHECKS)
def decode_window_off_by_one(threshold: int) -> Implementation:
    """Every draft row j > 0 sees one key too many (``+ j + 2`` instead of ``+ j + 1``)."""
    def decode(logits, next_n, seq_lens, indices, num_rows, stride0, stride1, top_k):
        ends = decode_row_ends(seq_lens, int(next_n), int(num_rows))
        j = torch.arange(num_rows, device=ends.device) % int(next_n)
        ends = torch.minimum(ends + (j > 0).long(), torch.tensor(logits.shape[1]))
        view = logits.as_strided((num_rows, logits.shape[1]), (stride0, stride1))
        _select_from_zero(view, ends, indices, top_k)
    return _impl("top_k_per_row_decode", "fault-decode-window-off-by-one", decode)


@FAULTS.seed("nan_ranks_highest", "top_k_per_row_prefill", "NaN selected", TOPK_CHECKS)
def nan_ranks_highest(threshold: int) -> Implementation:
    """Orders by the raw sortable bits, where a positive NaN sorts above +inf: NaN logits (a NaN
    in q or k upstream) are selected first (vLLM #49896, before PR #50201)."""
    def prefill(logits, row_starts, row_ends, indices, num_rows, stride0, stride1, top_k):
        view = _rows(logits, num_rows, stride0, stride1)
        ranked = torch.where(torch.isnan(view), float("inf"), view)
        ref.select_into(ranked, row_starts[:num_rows], row_ends[:num_rows], indices, int(top_k))
    return _impl("top_k_per_row_prefill", "fault-nan-ranks-highest", prefill)


STASH = 1024
"""On-chip slots a radix select of the faults below keeps for its threshold bin."""


def _order_keys(view: torch.Tensor) -> torch.Tensor:
    bits = view.float().contiguous().view(torch.int32).long() & 0xFFFFFFFF
    return torch.where(bits >= 1 << 31, bits ^ 0xFFFFFFFF, bits | (1 << 31))


@FAULTS.seed("threshold_bin_stash_overflow", "top_k_per_row_prefill", "dropped candidates",
             TOPK_CHECKS)
def threshold_bin_stash_overflow(threshold: int) -> Implementation:
    """A radix select that keeps at most STASH candidates of its threshold bin (the k-th value's
    top 12 key bits) and silently drops the rest (vLLM #51782, SGLang #36807): random rows never
    fill the stash; dense near-equal rows lose candidates and select smaller values."""
    def prefill(logits, row_starts, row_ends, indices, num_rows, stride0, stride1, top_k):
        view = _rows(logits, num_rows, stride0, stride1)
        ref.top_k_per_row_prefill(logits, row_starts, row_ends, indices, num_rows, stride0,
                                  stride1, top_k)
        for r in range(int(num_rows)):
            s, e = int(row_starts[r]), int(row_ends[r])
            if e - s <= top_k:
                continue
            keys = _order_keys(view[r, s:e])
            kth = keys.topk(int(top_k)).values[-1]
            in_bin = (keys >> 20) == (kth >> 20)
            if int(in_bin.sum()) <= STASH:
                continue
            kept = torch.where(in_bin, torch.cumsum(in_bin.long(), 0) <= STASH, True)
            ranked = torch.where(kept, keys, -1)
            chosen = ranked.topk(int(top_k)).indices
            indices[r, :top_k] = chosen.int()
    return _impl("top_k_per_row_prefill", "fault-threshold-bin-stash-overflow", prefill)


@FAULTS.seed("tie_flood_leaves_minus_one", "top_k_per_row_decode", "-1 inside the valid prefix",
             TOPK_CHECKS)
def tie_flood_leaves_minus_one(threshold: int) -> Implementation:
    """More than STASH values equal to the k-th value: the slots the stash could not fill stay -1
    inside the row's valid prefix (SGLang #30645), so a reader gathers KV slot -1."""
    def decode(logits, next_n, seq_lens, indices, num_rows, stride0, stride1, top_k):
        ref.top_k_per_row_decode(logits, next_n, seq_lens, indices, num_rows, stride0, stride1,
                                 top_k)
        view = _rows(logits, num_rows, stride0, stride1)
        for r in range(int(num_rows)):
            row = indices[r, :top_k]
            valid = row >= 0
            if not valid.any():
                continue
            picked = view[r, row[valid].long()]
            kth = picked.min()
            tied = (view[r] == kth).sum()
            if int(tied) > STASH:
                at_kth = torch.nonzero(valid & (view[r, row.clamp_min(0).long()] == kth)).flatten()
                row[at_kth[:max(0, len(at_kth) - STASH // 2)]] = -1
    return _impl("top_k_per_row_decode", "fault-tie-flood-leaves-minus-one", decode)


@FAULTS.seed("padded_row_end_read_unsigned", "top_k_per_row_decode", "stale row selected",
             TOPK_CHECKS)
def padded_row_end_read_unsigned(threshold: int) -> Implementation:
    """A padded draft row's causal end ``seq_len - next_n + j + 1`` is <= 0; read as an unsigned
    length it wraps to a huge one, clamped to the row: the kernel selects over the whole stale
    row instead of writing -1 (SGLang #30378)."""
    def decode(logits, next_n, seq_lens, indices, num_rows, stride0, stride1, top_k):
        j = torch.arange(int(num_rows), device=seq_lens.device) % int(next_n)
        ends = seq_lens.long().repeat_interleave(int(next_n))[:int(num_rows)] - int(next_n) + j + 1
        ends = torch.where(ends <= 0, logits.shape[1], ends).clamp_max(logits.shape[1])
        view = _rows(logits, num_rows, stride0, stride1)
        _select_from_zero(view, ends, indices, top_k)
    return _impl("top_k_per_row_decode", "fault-padded-row-end-read-unsigned", decode)


@FAULTS.seed("zero_logit_read_as_empty", "top_k_per_row_prefill", "-1 inside the valid prefix",
             TOPK_CHECKS)
def zero_logit_read_as_empty(threshold: int) -> Implementation:
    """Uses 0.0 as its "empty slot" marker: a selected logit that is zero (either sign) is written
    as -1, so all-zero rows (padding tokens, cleared logits) come back with no index."""
    def prefill(logits, row_starts, row_ends, indices, num_rows, stride0, stride1, top_k):
        ref.top_k_per_row_prefill(logits, row_starts, row_ends, indices, num_rows, stride0,
                                  stride1, top_k)
        view = _rows(logits, num_rows, stride0, stride1)
        block = indices[:num_rows, :top_k]
        cols = (block.long() + row_starts[:num_rows, None].long()).clamp(0, view.shape[1] - 1)
        picked = view.gather(1, cols)
        block.copy_(torch.where((block >= 0) & (picked == 0), -1, block))
    return _impl("top_k_per_row_prefill", "fault-zero-logit-read-as-empty", prefill)


@FAULTS.seed("flushes_subnormals", "top_k_per_row_decode", "wrong values selected",
             TOPK_CHECKS)
def flushes_subnormals(threshold: int) -> Implementation:
    """Ranks by values with subnormals flushed to zero (FTZ arithmetic on the order keys): distinct
    tiny logits tie at 0, and the kernel picks among them arbitrarily."""
    def decode(logits, next_n, seq_lens, indices, num_rows, stride0, stride1, top_k):
        view = _rows(logits, num_rows, stride0, stride1)
        subnormal = view.abs() < torch.finfo(torch.float32).tiny
        flushed = torch.where(subnormal, 0.0, view)
        ends = decode_row_ends(seq_lens, int(next_n), int(num_rows))
        _select_from_zero(flushed, ends, indices, top_k)
    return _impl("top_k_per_row_decode", "fault-flushes-subnormals", decode)


@FAULTS.seed("seq_lens_2d_read_as_1d", "top_k_per_row_decode", "wrong window",
             TOPK_CHECKS)
def seq_lens_2d_read_as_1d(threshold: int) -> Implementation:
    """Reads a [batch, next_n] seq_lens as if it were [batch]: its first ``batch`` entries taken
    as the requests' lengths, whatever the row."""
    def decode(logits, next_n, seq_lens, indices, num_rows, stride0, stride1, top_k):
        batch = -(-int(num_rows) // int(next_n))
        lens = seq_lens.reshape(-1)[:batch].contiguous()
        ends = decode_row_ends(lens, int(next_n), int(num_rows)).clamp_max(logits.shape[1])
        view = _rows(logits, num_rows, stride0, stride1)
        _select_from_zero(view, ends, indices, top_k)
    return _impl("top_k_per_row_decode", "fault-seq-lens-2d-read-as-1d", decode)


@FAULTS.seed("row_offset_wraps_at_2_31", "top_k_per_row_decode", "32-bit offset overflow",
             TOPK_PAST_2_31, needs_gpu=True, fuzz_max_elements=3 * 2 ** 30)
def row_offset_wraps_at_2_31(threshold: int) -> Implementation:
    """Computes a row's element offset ``row * stride0`` in signed 32-bit arithmetic: past 2^31
    logits it wraps, and the rows there are selected from the rows the offset lands on."""
    def decode(logits, next_n, seq_lens, indices, num_rows, stride0, stride1, top_k):
        rows = torch.arange(int(num_rows), device=logits.device)
        wrapped = (rows * int(stride0)) % 2 ** 31 // int(stride0)
        view = _rows(logits, num_rows, stride0, stride1)[wrapped]
        ends = decode_row_ends(seq_lens, int(next_n), int(num_rows))
        _select_from_zero(view, ends, indices, top_k)
    return _impl("top_k_per_row_decode", "fault-row-offset-wraps-at-2-31", decode)


@FAULTS.seed("last_column_dropped_at_full_width", "top_k_per_row_decode", "wrong window",
             TOPK_CHECKS)
def last_column_dropped_at_full_width(threshold: int) -> Implementation:
    """Clamps every window's end to ``N - 1`` (a kernel that assumes the logits buffer is padded
    one column wider than any row): right until a row is as long as the buffer."""
    def decode(logits, next_n, seq_lens, indices, num_rows, stride0, stride1, top_k):
        ends = decode_row_ends(seq_lens, int(next_n), int(num_rows)).clamp_max(logits.shape[1] - 1)
        view = _rows(logits, num_rows, stride0, stride1)
        _select_from_zero(view, ends, indices, top_k)
    return _impl("top_k_per_row_decode", "fault-last-column-dropped-at-full-width", decode)


@FAULTS.seed("rows_at_packed_width", "top_k_per_row_prefill", "strided input read as packed",
             LAYOUTS)
def rows_at_packed_width(threshold: int) -> Implementation:
    """Steps from row to row by the logits' width (``logits.shape[1]``) instead of ``stride0``:
    right on packed logits, another row's (or the padding's) values on rows with padded strides."""
    def prefill(logits, row_starts, row_ends, indices, num_rows, stride0, stride1, top_k):
        view = _rows(logits, num_rows, logits.shape[1] * stride1, stride1)
        ref.select_into(view, row_starts[:num_rows], row_ends[:num_rows], indices, int(top_k))
    return _impl("top_k_per_row_prefill", "fault-rows-at-packed-width", prefill)


@FAULTS.seed("columns_assumed_unit_stride", "top_k_per_row_decode", "stride1 ignored", LAYOUTS)
def columns_assumed_unit_stride(threshold: int) -> Implementation:
    """Honours ``stride0`` but reads a row's columns one element apart, whatever ``stride1``
    says: only logits stored column-major (a transposed view) show it."""
    def decode(logits, next_n, seq_lens, indices, num_rows, stride0, stride1, top_k):
        ends = decode_row_ends(seq_lens, int(next_n), int(num_rows))
        _select_from_zero(_rows(logits, num_rows, stride0, 1), ends, indices, top_k)
    return _impl("top_k_per_row_decode", "fault-columns-assumed-unit-stride", decode)


@FAULTS.seed("logits_padding_as_scratch", "top_k_per_row_decode",
             "write into the parent buffer's padding", LAYOUTS)
def logits_padding_as_scratch(threshold: int) -> Implementation:
    """Right indices, but where logits rows are padded (stride0 past the row's width) it marks
    each finished row by writing -inf into the first padding column: memory outside the
    logits view it was given (issue 63: NaN in the hidden columns of strided logits read good)."""
    def decode(logits, next_n, seq_lens, indices, num_rows, stride0, stride1, top_k):
        ref.top_k_per_row_decode(logits, next_n, seq_lens, indices, num_rows, stride0, stride1,
                                 top_k)
        width = logits.shape[1]
        if stride1 == 1 and stride0 > width:
            logits.as_strided((int(num_rows), 1), (stride0, 1),
                              logits.storage_offset() + width).fill_(float("-inf"))
    return _impl("top_k_per_row_decode", "fault-logits-padding-as-scratch", decode)


@FAULTS.seed("windows_cached_on_shape", "top_k_per_row_prefill", "stale metadata",
             CALL_SEQUENCE)
def windows_cached_on_shape(threshold: int) -> Implementation:
    """Keeps the rows' windows (row_starts, row_ends) of the first call of each shape, keyed
    on (num_rows, logits shape, top_k) alone: the next call of that shape selects in the old
    windows."""
    windows: dict = {}

    def prefill(logits, row_starts, row_ends, indices, num_rows, stride0, stride1, top_k):
        key = (int(num_rows), tuple(logits.shape), int(top_k))
        starts, ends = windows.setdefault(key, (row_starts.clone(), row_ends.clone()))
        ref.top_k_per_row_prefill(logits, starts, ends, indices, num_rows, stride0, stride1,
                                  top_k)
    return _impl("top_k_per_row_prefill", "fault-windows-cached-on-shape", prefill)


LONG_ROW = 4096
"""Rows longer than this take the stateful path of the fault below (the shipped kernel's
register tile: the cheapest threshold a CPU batch crosses)."""


@FAULTS.seed("histogram_stale_after_short_row", "top_k_per_row_decode", "state carried between rows",
             TOPK_MIXED_ROWS)
def histogram_stale_after_short_row(threshold: int) -> Implementation:
    """Rows longer than LONG_ROW find their threshold from a histogram that only the long path
    clears, after its row: a short row between two long ones leaves the first one's counts in
    it, so the second long row's threshold is too high and slots of its valid prefix stay -1
    (the class of vLLM #49139). Batches of only long or only short rows are right."""
    def decode(logits, next_n, seq_lens, indices, num_rows, stride0, stride1, top_k):
        ref.top_k_per_row_decode(logits, next_n, seq_lens, indices, num_rows, stride0, stride1,
                                 top_k)
        view = _rows(logits, num_rows, stride0, stride1)
        ends = decode_row_ends(seq_lens, int(next_n), int(num_rows))
        k, last_long, stale = int(top_k), None, None
        for r in range(int(num_rows)):
            row = view[r, :int(ends[r])]
            if len(row) <= LONG_ROW:
                stale = last_long
                continue
            if stale is not None:
                kth = torch.cat([row, stale]).topk(k).values[-1]
                chosen = torch.nonzero(row >= kth).flatten()[:k].int()
                indices[r, :k] = -1
                indices[r, :len(chosen)] = chosen
            last_long, stale = row, None
    return _impl("top_k_per_row_decode", "fault-histogram-stale-after-short-row", decode)


@FAULTS.seed("first_call_longest_window_kept", "top_k_per_row_decode", "value of the first call",
             CALL_SEQUENCE)
def first_call_longest_window_kept(threshold: int) -> Implementation:
    """Sizes its select by the longest window of its first call (a bound read on the host at
    warm-up and kept) and clamps every later window to it: right while contexts only shrink,
    it drops keys as soon as a call's contexts are longer than the first call's."""
    first: dict = {}

    def decode(logits, next_n, seq_lens, indices, num_rows, stride0, stride1, top_k):
        ends = decode_row_ends(seq_lens, int(next_n), int(num_rows))
        bound = first.setdefault("longest", int(ends.max()) if len(ends) else 0)
        view = _rows(logits, num_rows, stride0, stride1)
        _select_from_zero(view, ends.clamp_max(bound), indices, top_k)
    return _impl("top_k_per_row_decode", "fault-first-call-longest-window-kept", decode)
