"""Drift limits of a golden from clean reruns of one build (``harness golden record --reruns N``).

A batching server (vLLM) is not batch invariant in bf16: the same prompt at concurrency 1 and 8
gets other reduction orders, so logprobs move and near-ties flip with no change to the server.
The limits that tell that noise from a regression are measured, not guessed: the recording run
and N more clean runs of the same build, each at every level, compared

- level by level with the recording run (what a later run's comparison with the golden sees), and
- each level with the same run's lowest level (what the cross-level comparison sees);

then every limit is ``NOISE_FACTOR`` times the worst value seen (a few reruns see less than the
worst clean run), at least ``FLOOR`` (the records' 1e-4 rounding). The golden keeps the figures
and says how they were set (``judge.drift.source``); the false-alarm rate this gives over more
clean runs is in docs/e2e-vllm.md.
"""

from __future__ import annotations

import math
from typing import Mapping, Sequence

from harness.e2e.drift import Continuation, compare

NOISE_FACTOR = 2.0
FLOOR = 0.01
BEYOND_MARGIN = ("outside-top-n", "confident")
"""Flips no near-tie limit can absorb: a token outside the other's top-N, or one side's end of
text against a token (``compare`` with an infinite near-tie calls no other flip confident)."""


def _pairs(a: Mapping[str, dict], b: Mapping[str, dict]):
    common = sorted(set(a) & set(b), key=int)
    if len(common) != len(a) or len(common) != len(b):
        raise ValueError(f"clean reruns hold logprobs for other questions ({len(a)} vs {len(b)}, "
                         f"{len(common)} in common): rerun with the same --limit")
    return [(Continuation.from_compact(a[q]), Continuation.from_compact(b[q])) for q in common]


def comparisons(runs: Sequence[Mapping[int, Mapping[str, dict]]]) -> list[tuple[str, list]]:
    """``runs``: per clean run, level -> question -> compact record; the first is the recording
    run. Returns (label, drifts) for each comparison a later run's judgement makes."""
    out = []
    base = runs[0]
    for i, run in enumerate(runs):
        lowest = min(run)
        for level in sorted(run):
            if i and level in base:
                out.append((f"rerun {i} level {level} vs recording level {level}",
                            [compare(a, b, math.inf) for a, b in _pairs(base[level], run[level])]))
            if level != lowest:
                out.append((f"run {i} level {level} vs its level {lowest}",
                            [compare(a, b, math.inf) for a, b in _pairs(run[lowest], run[level])]))
    return out


def limits(runs: Sequence[Mapping[int, Mapping[str, dict]]], what: str) -> dict:
    """``judge.drift`` for a golden from clean ``runs`` (see the module docstring)."""
    if len(runs) < 2:
        raise ValueError("drift limits need at least one clean rerun besides the recording run "
                         "(--reruns 1 or more)")
    found = comparisons(runs)
    drifts = [d for _, ds in found for d in ds]
    delta = max((d.max_delta for d in drifts), default=0.0)
    margin = max((d.margin for d in drifts if d.margin is not None), default=0.0)
    share = max((sum(d.flip in BEYOND_MARGIN for d in ds) / len(ds) for _, ds in found if ds),
                default=0.0)
    flips = sum(d.divergence is not None for d in drifts)
    return {
        "near_tie": round(max(FLOOR, NOISE_FACTOR * margin), 4),
        "max_delta": round(max(FLOOR, NOISE_FACTOR * delta), 4),
        "max_confident_share": round(min(1.0, NOISE_FACTOR * share), 4),
        "vouches": True,
        "source": (f"{what}: {len(runs) - 1} clean rerun(s) of the recording build, "
                   f"{len(found)} comparisons of {len(drifts)} continuations (each level with the "
                   f"recording run's, and with its own run's lowest level): {flips} diverged; worst "
                   f"|delta logprob| before a divergence {delta:.4g}, widest flip margin "
                   f"{margin:.4g} nats, share beyond any margin {share:.3g}; limits "
                   f"{NOISE_FACTOR:g}x those, at least {FLOOR:g} (harness.e2e.noise)"),
        "measured": {"max_delta": round(delta, 4), "flip_margin": round(margin, 4),
                     "beyond_margin_share": round(share, 4), "diverged": flips,
                     "continuations": len(drifts), "reruns": len(runs) - 1},
    }
