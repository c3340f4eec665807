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

This module launches them and registers the ops; beside it, ``triton_plan`` holds the launch
plans and the arithmetic of sizes and scratch layout, ``triton_coarse`` the kernels of launches 1
and 2, ``triton_finish`` those of 3 and 4, and ``triton_row`` the device functions both use.

Offsets come from prefix sums, not atomics, so the output (set and order: elements above b* in
column order, then the chosen candidates in column order; equal values taken lowest column
first) depends only on the row, whatever the chunking, the launch split or the rest of the batch.

Window values (row_starts / row_ends / seq_lens) are checked inside the kernels: they are
clamped so no access leaves the row, and the worst error (code and row) is kept in an error
word of ``kernels.runtime.deferred``: no host synchronisation on the hot path; the contract error
is raised by ``deferred.raise_pending()`` (the harness calls it after every call it judges).

NaN is never selected (../shared/spec/ops.md): its order key (``triton_row.NAN_KEY``) is below
every other, so a NaN is chosen only when a row has fewer than top_k other values, and a chosen
one is written as -1. Every pass is bound by its instructions, not by memory, so the kernels keep
them few (int32 index arithmetic, unmasked whole tiles, one prefix sum for two counts); figures
and the designs measured are in ``docs/kernels/topk.md``.
"""

from __future__ import annotations

import dataclasses
import functools

import torch

from kernels.runtime import deferred
from kernels.runtime.device import triton_interpreted, triton_unavailable_reason
from harness.core.registry import register
from kernels.topk import validate
from kernels.runtime.triton_utils import Launch
from kernels.topk.triton_coarse import _coarse_filter, _coarse_hist
from kernels.topk.triton_finish import _finish_long, _finish_rows
from kernels.topk.triton_plan import DEFAULT_PLAN, MAX_SLICES, PLANS, LaunchPlan, _layout, _regs


_REASON = triton_unavailable_reason()
_HERE = {"available": _REASON is None, "reason": _REASON or "", "triton": True}
"""How every kernel of this file registers: runnable where Triton is, launching Triton kernels."""


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
