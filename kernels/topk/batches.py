"""Batch layouts shared by the top-k and indexer specs: ragged prefill windows and decode rows.

A ragged prefill batch of ``rows`` query tokens is split into ``seqs`` sequences; each sequence
brings some cached context (up to ``n // seqs`` keys) before its own tokens, and its keys sit
after the previous sequence's in one key array. Query token ``p`` of a sequence sees the
sequence's context and its own first ``p + 1`` tokens: ``[start, start + ctx + p + 1)``.
"""

from __future__ import annotations

import dataclasses
import itertools

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


def ragged_prefill(rows: int, seqs: int, n: int, g: torch.Generator,
                   context: int | None = None) -> RaggedPrefill:
    """``context``: every sequence's cached keys (else drawn up to its share of ``n``)."""
    seqs = max(1, min(seqs, max(rows, 1)))
    cuts = torch.sort(torch.randperm(max(rows - 1, 0), generator=g)[:seqs - 1] + 1).values
    lens = torch.diff(torch.cat([torch.tensor([0]), cuts, torch.tensor([rows])]))
    ctx = (torch.randint(0, n // len(lens) + 1, (len(lens),), generator=g) if context is None
           else torch.full((len(lens),), context))
    starts, ends, key_start = [], [], 0
    for length, c in zip(lens.tolist(), ctx.tolist()):
        pos = torch.arange(length)
        starts.append(torch.full((length,), key_start))
        ends.append(key_start + c + pos + 1)
        key_start += c + length
    starts_t = torch.cat(starts).int() if starts else torch.zeros(0, dtype=torch.int32)
    ends_t = torch.cat(ends).int() if ends else torch.zeros(0, dtype=torch.int32)
    return RaggedPrefill(starts_t, ends_t, key_start, lens.tolist(), ctx.tolist())


def decode_seq_lens(batch: int, next_n: int, n: int, g: torch.Generator,
                    lengths: str = "random", top_k: int = 0) -> torch.Tensor:
    """int32 [batch] context lengths in [next_n, n]; ``random``: the first request short (a few
    keys) so every batch mixes short and long rows; else as ``window_lengths`` draws them."""
    if n < next_n:
        raise ValueError(f"a decode context of {n} keys is shorter than next_n={next_n}: each "
                         "request holds at least its next_n draft tokens; give context >= next_n")
    if lengths != "random":
        return window_lengths(lengths, batch, n, top_k, g).clamp_min(next_n).int()
    seq_lens = torch.randint(next_n, n + 1, (batch,), generator=g, dtype=torch.int32)
    if batch > 1:
        seq_lens[0] = min(n, next_n + 3)
    return seq_lens


LENGTHS = ("random", "long", "short", "straddle")
"""How the rows' context lengths are drawn: ``random`` (the batch layouts above), ``long``
(longer than half the context), ``short`` (at most top_k keys), ``straddle`` (rows on both
sides of every threshold in ``straddling_lengths``, in every order)."""
STRADDLED = (4096, 32768)
"""Row lengths where top-k kernels change path, beside top_k itself: 4096, the shipped Triton
kernel's register tile (``LaunchPlan.reg_tile``: a row with more candidates takes the
multi-program finish); 32768, where vLLM's radix top-k switches to its multi-pass path (vLLM
#49139: a row longer than 32768 columns, a short one, then another long one left a histogram
stale)."""


def straddling_lengths(n: int, top_k: int) -> list[int]:
    """Row lengths that cross every threshold below ``n`` (top_k and STRADDLED), at the
    cheapest crossing (the threshold itself and one past it), in every order: for each pair
    of bands, long, short, long, short, long, short. Top_k = 16: 6 rows up to 4096 columns,
    18 up to 32768, 36 past it."""
    edges = sorted({e for e in (top_k, *STRADDLED) if 1 <= e < n})
    bands = list(zip([1] + [e + 1 for e in edges], edges + [n]))
    out: list[int] = []
    for (s_lo, s_hi), (l_lo, l_hi) in itertools.combinations(bands, 2):
        out += [l_hi, s_hi, l_lo, s_lo, l_hi, s_lo]
    return out or [n]


def window_lengths(lengths: str, rows: int, n: int, top_k: int, g: torch.Generator
                   ) -> torch.Tensor:
    """int64 [rows] window lengths in [1, n] (``LENGTHS``; ``straddle`` repeats its pattern
    over the rows, so a batch of fewer rows than the pattern crosses fewer thresholds)."""
    if lengths == "long":
        return torch.randint(n // 2 + 1, n + 1, (rows,), generator=g)
    if lengths == "short":
        return torch.randint(1, max(1, min(top_k, n)) + 1, (rows,), generator=g)
    if lengths == "straddle":
        pattern = torch.tensor(straddling_lengths(n, top_k))
        return pattern.repeat(rows // len(pattern) + 1)[:rows]
    raise ValueError(f"unknown lengths {lengths!r}; choose one of {', '.join(LENGTHS)}")
