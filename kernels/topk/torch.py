"""Torch reference of top_k_per_row_prefill / _decode, writing the caller's ``indices`` in place
exactly like vLLM's ops: offsets relative to row_starts, -1 in every unused slot."""

from __future__ import annotations

import torch

from harness.core.registry import register
from kernels.topk import validate

ROW_CHUNK = 256


def select_into(logits: torch.Tensor, starts: torch.Tensor, ends: torch.Tensor,
                indices: torch.Tensor, top_k: int) -> None:
    """Rows ``r``: the largest ``min(top_k, len)`` logits of ``[starts[r], ends[r])``.

    Valid -inf logits are still valid positions (ranked below every finite value); columns
    outside the window never are, and neither is NaN (../shared/spec/ops.md, updated
    2026-11-25): it ranks below -inf and is never selected, so a row with fewer than
    ``min(top_k, len)`` non-NaN values pads the rest with -1.
    """
    num_rows, n = starts.shape[0], logits.shape[1]
    cols = torch.arange(n, device=logits.device)
    for r0 in range(0, num_rows, ROW_CHUNK):
        s = starts[r0:r0 + ROW_CHUNK].long()[:, None]
        e = ends[r0:r0 + ROW_CHUNK].long()[:, None]
        vals = logits[r0:r0 + ROW_CHUNK].double()
        valid = (cols >= s) & (cols < e) & ~torch.isnan(vals)
        keyed = torch.where(valid, torch.where(vals == float("-inf"),
                                               torch.finfo(torch.float64).min, vals),
                            float("-inf"))
        k = min(top_k, n)
        top = keyed.topk(k, dim=1).indices if k else keyed[:, :0].long()
        count = valid.sum(dim=1, keepdim=True).clamp_max(top_k)
        slot = torch.arange(top_k, device=logits.device)
        out = torch.full((top.shape[0], top_k), -1, dtype=torch.long, device=logits.device)
        out[:, :k] = top - s
        out = torch.where(slot < count, out, -1)
        indices[r0:r0 + out.shape[0], :top_k] = out.to(torch.int32)


def _view(logits, num_rows, stride0, stride1):
    return logits.as_strided((num_rows, logits.shape[1]), (stride0, stride1))


@register("top_k_per_row_prefill", "torch")
def top_k_per_row_prefill(logits, row_starts, row_ends, indices, num_rows, stride0, stride1,
                          top_k):
    validate.check_prefill(logits, row_starts, row_ends, indices, num_rows, stride0, stride1,
                           top_k)
    select_into(_view(logits, num_rows, stride0, stride1), row_starts[:num_rows],
                row_ends[:num_rows], indices, int(top_k))


@register("top_k_per_row_decode", "torch", declared={
    "cuda_graph": "not capturable: the reference checks every row window on the host"})
def top_k_per_row_decode(logits, next_n, seq_lens, indices, num_rows, stride0, stride1, top_k):
    ends = validate.check_decode(logits, next_n, seq_lens, indices, num_rows, stride0, stride1,
                                 top_k)
    select_into(_view(logits, num_rows, stride0, stride1), torch.zeros_like(ends), ends, indices,
                int(top_k))
