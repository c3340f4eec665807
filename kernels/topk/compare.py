"""Tie-aware comparison of top-k index sets, and the guard-band check of in-place outputs.

A selection is correct when, row by row: the number of valid entries is exactly
``min(top_k, non-NaN values in the window)``; every other slot holds -1 (no stale values); valid
entries are distinct offsets inside the row's window, none of them at a NaN logit (NaN is never
selected: ../shared/spec/ops.md); and the multiset of the selected logits equals the multiset of
the reference's (so any choice among equal values passes, and nothing else does). Index sets are
compared too, but only reported: with ties they may differ legitimately.
"""

from __future__ import annotations

import torch

SENTINEL = 0x5A5A5A5A


def compare_topk(out: torch.Tensor, ref: torch.Tensor, logits: torch.Tensor,
                 starts: torch.Tensor, ends: torch.Tensor, top_k: int,
                 slack: torch.Tensor | None = None) -> dict:
    """``out``/``ref``: [rows, top_k] int32 local offsets; ``logits``: [rows, N] row view.

    ``slack`` [rows] (default 0) lets the selected logits differ from the reference's, sorted,
    by that much per row: when ``out`` was selected on logits carrying rounding error, choices
    among values closer than that error are all correct, and nothing further off is."""
    rows = out.shape[0]
    row: dict = {"rows": rows}
    if tuple(out.shape) != tuple(ref.shape) or out.dtype != torch.int32:
        row.update(passed=False, detail=f"indices {tuple(out.shape)} {out.dtype}, contract "
                                        f"{tuple(ref.shape)} int32")
        return row
    out, ref = out.long(), ref.long()
    s, e = starts.long()[:, None], ends.long()[:, None]
    length = (e - s).clamp_min(0)
    n = logits.shape[1]
    cols = torch.arange(n, device=logits.device)
    nan_in_window = (torch.isnan(logits) & (cols >= s) & (cols < e)).sum(1)
    expected = (length.squeeze(1) - nan_in_window).clamp_max(top_k)
    valid = (out >= 0) & (out < length)
    stale = (~valid) & (out != -1)
    count_bad = valid.sum(1) != expected
    at_nan = valid & torch.isnan(torch.gather(logits, 1, (out + s).clamp(0, max(n - 1, 0)))
                                 if n else torch.zeros_like(valid))
    srt = torch.where(valid, out, -1).sort(dim=1, descending=True).values
    dup = ((srt[:, 1:] == srt[:, :-1]) & (srt[:, 1:] >= 0)).any(1)

    def picked(idx, ok):
        cols = (idx + s).clamp(0, max(n - 1, 0))
        vals = torch.gather(logits.double(), 1, cols) if n else torch.zeros_like(idx, dtype=torch.float64)
        return torch.where(ok, vals, float("-inf")).sort(dim=1, descending=True).values

    ref_valid = ref >= 0
    got, want = picked(out, valid), picked(ref, ref_valid)
    if slack is None:
        values_bad = ~(got == want).all(1)
    else:
        close = (got == want) | ((got - want).abs() <= slack.double().to(got.device)[:, None])
        values_bad = ~close.all(1)
    row["recall"] = recall(out, valid, ref, ref_valid)
    sets_differ = ~(torch.where(valid, out, -1).sort(1).values
                    == torch.where(ref_valid, ref, -1).sort(1).values).all(1)
    row.update(nan_selected=int(at_nan.sum()), stale_slots=int(stale.sum()),
               count_mismatch_rows=int(count_bad.sum()),
               duplicate_rows=int(dup.sum()), value_mismatch_rows=int(values_bad.sum()),
               tie_resolved_rows=int((sets_differ & ~values_bad).sum()))
    problems = []
    for key, what in (("nan_selected", "slots selecting a NaN logit (NaN is never selected)"),
                      ("count_mismatch_rows", "rows with a wrong number of valid entries"),
                      ("stale_slots", "slots neither a valid offset nor -1 (stale/global/unwritten)"),
                      ("duplicate_rows", "rows with a repeated offset"),
                      ("value_mismatch_rows", "rows whose selected logits are not the top-k")):
        if row[key]:
            first = {"count_mismatch_rows": count_bad, "duplicate_rows": dup,
                     "value_mismatch_rows": values_bad, "nan_selected": at_nan.any(1)
                     }.get(key, stale.any(1))
            r = int(torch.nonzero(first)[0]) if first.any() else -1
            problems.append(f"{row[key]} {what} (first row {r})")
    row["passed"] = not problems
    row["detail"] = "; ".join(problems)
    row["mismatch_frac"] = float((count_bad | dup | values_bad | stale.any(1) | at_nan.any(1))
                                 .float().mean()) if rows else 0.0
    return row


def recall(out, valid, ref, ref_valid) -> float:
    """Fraction of the reference's selected offsets that ``out`` also selected."""
    total = int(ref_valid.sum())
    if total == 0 or out.shape[1] == 0:
        return 1.0
    ref_sorted = torch.where(ref_valid, ref, -2).sort(dim=1).values.contiguous()
    probe = torch.where(valid, out, -3).contiguous()
    pos = torch.searchsorted(ref_sorted, probe).clamp_max(ref_sorted.shape[1] - 1)
    found = (torch.gather(ref_sorted, 1, pos) == probe) & valid
    return int(found.sum()) / total


def guarded_buffer(rows: int, cols: int, pad_rows: int, device, band: int = 2,
                   extra_cols: int = 3, side_cols: bool = True) -> torch.Tensor:
    """An int32 [rows + pad_rows, cols] view inside a sentinel-filled buffer with ``band``
    guard rows above and below and guard columns on both sides. ``side_cols=False``: guard rows
    only, so the view's rows are contiguous, as in a buffer allocated exactly ``cols`` wide."""
    left, right = (band, extra_cols) if side_cols else (0, 0)
    base = torch.full((band + rows + pad_rows + band, left + cols + right), SENTINEL,
                      dtype=torch.int32, device=device)
    return base[band:band + rows + pad_rows, left:left + cols]


def whole_buffer(view: torch.Tensor) -> torch.Tensor:
    """The whole storage under ``view``, flat, from offset 0: its guard buffer, also for a view
    loaded from a case file (``torch.load`` keeps the storage but not ``_base``)."""
    elements = view.untyped_storage().nbytes() // view.element_size()
    return view.new_empty(0).set_(view.untyped_storage(), 0, (elements,), (1,))


def fresh_copy(view: torch.Tensor) -> torch.Tensor:
    """The same view geometry over a fresh copy of its whole buffer (re-poisoned)."""
    clone = torch.full_like(whole_buffer(view), SENTINEL)
    return clone.as_strided(view.shape, view.stride(), view.storage_offset())


def guard_violations(view: torch.Tensor, written_rows: int, written_cols: int) -> int:
    """Cells of the base buffer outside ``view[:written_rows, :written_cols]`` that changed."""
    base = whole_buffer(view)
    mask = torch.ones_like(base, dtype=torch.bool)
    flat_offsets = (torch.arange(written_rows, device=base.device)[:, None] * view.stride(0)
                    + torch.arange(written_cols, device=base.device)[None, :] * view.stride(1)
                    + view.storage_offset() - base.storage_offset())
    mask.view(-1)[flat_offsets.reshape(-1)] = False
    return int(((base != SENTINEL) & mask).sum())
