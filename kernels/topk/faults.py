"""Seeded faults of top-k per row: the two bugs vLLM PR 42810 fixed, and their neighbours."""

from __future__ import annotations

import torch

from harness.core.faults import SeededFaults
from harness.core.registry import Implementation
from kernels.topk import torch as ref
from kernels.topk.validate import decode_row_ends

FAULTS = SeededFaults()


def _impl(op, name, fn) -> Implementation:
    return Implementation(op=op, name=name, fn=fn, source=__name__)


@FAULTS.seed("global_offsets", "top_k_per_row_prefill", "index contract", "topk_checks")
def global_offsets(threshold: int) -> Implementation:
    """Returns global column numbers instead of offsets from row_starts."""
    def prefill(logits, row_starts, row_ends, indices, num_rows, stride0, stride1, top_k):
        ref.top_k_per_row_prefill(logits, row_starts, row_ends, indices, num_rows, stride0,
                                  stride1, top_k)
        block = indices[:num_rows, :top_k]
        block.copy_(torch.where(block >= 0, block + row_starts[:num_rows, None], block))
    return _impl("top_k_per_row_prefill", "fault-global-offsets", prefill)


@FAULTS.seed("stale_instead_of_minus_one", "top_k_per_row_decode", "index contract", "topk_checks")
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


@FAULTS.seed("writes_row_past_slice", "top_k_per_row_decode", "out-of-bounds write", "topk_checks")
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


@FAULTS.seed("decode_window_off_by_one", "top_k_per_row_decode", "index contract", "topk_checks")
def decode_window_off_by_one(threshold: int) -> Implementation:
    """Every draft row j > 0 sees one key too many (``+ j + 2`` instead of ``+ j + 1``)."""
    def decode(logits, next_n, seq_lens, indices, num_rows, stride0, stride1, top_k):
        ends = decode_row_ends(seq_lens, int(next_n), int(num_rows))
        j = torch.arange(num_rows, device=ends.device) % int(next_n)
        ends = torch.minimum(ends + (j > 0).long(), torch.tensor(logits.shape[1]))
        view = logits.as_strided((num_rows, logits.shape[1]), (stride0, stride1))
        ref.select_into(view, torch.zeros_like(ends), ends, indices, int(top_k))
    return _impl("top_k_per_row_decode", "fault-decode-window-off-by-one", decode)


@FAULTS.seed("nan_ranks_highest", "top_k_per_row_prefill", "NaN selected", "topk_checks")
def nan_ranks_highest(threshold: int) -> Implementation:
    """Orders by the raw sortable bits, where a positive NaN sorts above +inf: NaN logits (a NaN
    in q or k upstream) are selected first (vLLM #49896, before PR #50201)."""
    def prefill(logits, row_starts, row_ends, indices, num_rows, stride0, stride1, top_k):
        view = logits.as_strided((int(num_rows), logits.shape[1]), (stride0, stride1))
        ranked = torch.where(torch.isnan(view), float("inf"), view)
        ref.select_into(ranked, row_starts[:num_rows], row_ends[:num_rows], indices, int(top_k))
    return _impl("top_k_per_row_prefill", "fault-nan-ranks-highest", prefill)
