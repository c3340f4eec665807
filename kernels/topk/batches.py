"""Batch layouts shared by the top-k and indexer specs: ragged prefill windows and decode rows.

A ragged prefill batch of ``rows`` query tokens is split into ``seqs`` sequences; each sequence
brings some cached context (up to ``n // seqs`` keys) before its own tokens, and its keys sit
after the previous sequence's in one key array. Query token ``p`` of a sequence sees the
sequence's context and its own first ``p + 1`` tokens: ``[start, start + ctx + p + 1)``.
"""

from __future__ import annotations

import dataclasses

import torch


@dataclasses.dataclass(frozen=True)
class RaggedPrefill:
    starts: torch.Tensor
    """int32 [rows]: first key of each query row's window."""
    ends: torch.Tensor
    """int32 [rows]: one past the last key."""
    num_keys: int
    seq_lens: list[int]
    """Query tokens per sequence."""
    contexts: list[int]
    """Cached keys per sequence before its own tokens."""


def ragged_prefill(rows: int, seqs: int, n: int, g: torch.Generator) -> RaggedPrefill:
    seqs = max(1, min(seqs, max(rows, 1)))
    cuts = torch.sort(torch.randperm(max(rows - 1, 0), generator=g)[:seqs - 1] + 1).values
    lens = torch.diff(torch.cat([torch.tensor([0]), cuts, torch.tensor([rows])]))
    ctx = torch.randint(0, n // len(lens) + 1, (len(lens),), generator=g)
    starts, ends, key_start = [], [], 0
    for length, c in zip(lens.tolist(), ctx.tolist()):
        pos = torch.arange(length)
        starts.append(torch.full((length,), key_start))
        ends.append(key_start + c + pos + 1)
        key_start += c + length
    starts_t = torch.cat(starts).int() if starts else torch.zeros(0, dtype=torch.int32)
    ends_t = torch.cat(ends).int() if ends else torch.zeros(0, dtype=torch.int32)
    return RaggedPrefill(starts_t, ends_t, key_start, lens.tolist(), ctx.tolist())


def decode_seq_lens(batch: int, next_n: int, n: int, g: torch.Generator) -> torch.Tensor:
    """int32 [batch] context lengths in [next_n, n]; the first request short (a few keys) so
    every batch mixes short and long rows."""
    if n < next_n:
        raise ValueError(f"a decode context of {n} keys is shorter than next_n={next_n}: each "
                         "request holds at least its next_n draft tokens; give context >= next_n")
    seq_lens = torch.randint(next_n, n + 1, (batch,), generator=g, dtype=torch.int32)
    if batch > 1:
        seq_lens[0] = min(n, next_n + 3)
    return seq_lens
