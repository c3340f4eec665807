"""Argument checks of the top-k contract, shared by the shipped backends (ops.md section 2)."""

from __future__ import annotations

import torch

from kernels.runtime.errors import ContractError, require  # noqa: F401  (re-exported: raised by these checks)
from kernels.runtime.memo import per_signature


def _want(cond: bool, msg) -> None:
    require(cond, msg, section=2)


def check_common(logits, indices, num_rows, stride0, stride1, top_k) -> None:
    _want(isinstance(logits, torch.Tensor) and logits.dtype == torch.float32,
          lambda: f"logits must be a float32 tensor, got {getattr(logits, 'dtype', type(logits))}")
    _want(logits.dim() == 2, lambda: f"logits must be [num_rows, N], got shape {tuple(logits.shape)}")
    _want(int(top_k) > 0, lambda: f"top_k must be > 0, got {top_k}")
    _want(int(num_rows) >= 0, lambda: f"num_rows must be >= 0, got {num_rows}")
    _want(isinstance(indices, torch.Tensor) and indices.dtype == torch.int32,
          lambda: f"indices must be an int32 tensor, got {getattr(indices, 'dtype', type(indices))}; "
          "allocate it with dtype=torch.int32")
    _want(indices.dim() == 2 and indices.shape[0] >= num_rows and indices.shape[1] >= top_k,
          lambda: f"indices must have >= num_rows={num_rows} rows and >= top_k={top_k} columns, got "
          f"{tuple(indices.shape)}")
    _want(logits.shape[0] >= num_rows, lambda: f"logits has {logits.shape[0]} rows < num_rows={num_rows}")
    _want((stride0, stride1) == tuple(logits.stride()),
          lambda: f"stride0/stride1 ({stride0}, {stride1}) must be logits.stride() {tuple(logits.stride())}")
    _want(indices.device == logits.device, "indices and logits must be on one device")


@per_signature
def check_prefill_args(logits, row_starts, row_ends, indices, num_rows, stride0, stride1,
                       top_k) -> None:
    """Every check that needs no look at device values (no synchronisation), once per call
    signature (``kernels.runtime.memo``)."""
    check_common(logits, indices, num_rows, stride0, stride1, top_k)
    for name, t in (("row_starts", row_starts), ("row_ends", row_ends)):
        _want(isinstance(t, torch.Tensor) and t.dtype == torch.int32 and t.dim() == 1
              and t.shape[0] >= num_rows,
              lambda: f"{name} must be int32 [>= num_rows={num_rows}], got "
              f"{getattr(t, 'dtype', type(t))} {tuple(getattr(t, 'shape', ()))}")
        _want(t.device == logits.device, lambda: f"{name} must be on the logits' device {logits.device}")


def check_prefill(logits, row_starts, row_ends, indices, num_rows, stride0, stride1, top_k):
    check_prefill_args(logits, row_starts, row_ends, indices, num_rows, stride0, stride1, top_k)
    if num_rows:
        s, e = row_starts[:num_rows].long(), row_ends[:num_rows].long()
        bad = torch.nonzero(e < s)
        _want(bad.numel() == 0, lambda: f"row_ends < row_starts at row {bad[:1].flatten().tolist()}")
        _want(bool((s >= 0).all()), "row_starts must be >= 0")
        _want(int(e.max()) <= logits.shape[1],
              lambda: f"row_ends reach column {int(e.max())} beyond the {logits.shape[1]} logits columns")


def decode_row_ends(seq_lens: torch.Tensor, next_n: int, num_rows: int) -> torch.Tensor:
    """Valid length of every decode row: ``seq_lens[b] - next_n + j + 1`` for row b*next_n+j
    (1-D seq_lens), or ``seq_lens[b, j]`` as given (2-D), clamped at 0."""
    if seq_lens.dim() == 2:
        ends = seq_lens.reshape(-1).long()
    else:
        j = torch.arange(num_rows, device=seq_lens.device) % next_n
        ends = seq_lens.long().repeat_interleave(next_n) - next_n + j + 1
    return ends[:num_rows].clamp_min(0)


@per_signature
def check_decode_args(logits, next_n, seq_lens, indices, num_rows, stride0, stride1,
                      top_k) -> None:
    """Every check that needs no look at device values (no synchronisation), once per call
    signature (``kernels.runtime.memo``)."""
    check_common(logits, indices, num_rows, stride0, stride1, top_k)
    _want(int(next_n) >= 1, lambda: f"next_n must be >= 1, got {next_n}")
    _want(isinstance(seq_lens, torch.Tensor) and seq_lens.dtype == torch.int32
          and seq_lens.dim() in (1, 2), lambda: f"seq_lens must be int32 [batch] or [batch, next_n], got "
          f"{getattr(seq_lens, 'dtype', type(seq_lens))} {tuple(getattr(seq_lens, 'shape', ()))}")
    rows = seq_lens.numel() if seq_lens.dim() == 2 else seq_lens.shape[0] * next_n
    _want(rows >= num_rows, lambda: f"seq_lens covers {rows} rows (batch*next_n) < num_rows={num_rows}")
    _want(seq_lens.device == logits.device, lambda: f"seq_lens must be on the logits' device {logits.device}")


def check_decode(logits, next_n, seq_lens, indices, num_rows, stride0, stride1,
                 top_k) -> torch.Tensor:
    """Checks the call and returns every row's valid length (see ``decode_row_ends``)."""
    check_decode_args(logits, next_n, seq_lens, indices, num_rows, stride0, stride1, top_k)
    ends = decode_row_ends(seq_lens, int(next_n), int(num_rows))
    if num_rows:
        _want(int(ends.max()) <= logits.shape[1],
              lambda: f"a decode row needs {int(ends.max())} columns but logits has {logits.shape[1]}")
    return ends
