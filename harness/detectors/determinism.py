"""Run-to-run determinism: the same implementation, called again on the same inputs, must give
the same bits.

A single run catches an intermittent race only when the race loses on that run (ROCm/aiter PR
3033: the lane holding row 0's sum of squares also wrote row 16's slot, so RMS normalisation
was corrupted now and then). The accuracy suite therefore runs cases more than once
(``Profile.runs``) and this module compares every later run with the first, bitwise, through
the spec's ``canonical`` view (top-k index order within a row is free, so rows are sorted).
A difference is a finding of its own, naming the tokens that differed.
"""

from __future__ import annotations

import torch

from harness.detectors import Finding
from harness.specs import Case, OpSpec

_INT_OF_SIZE = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def _bits(t: torch.Tensor) -> torch.Tensor:
    t = t.detach().contiguous()
    return t.view(_INT_OF_SIZE[t.element_size()]) if t.dtype.is_floating_point else t


def differing_tokens(a: torch.Tensor, b: torch.Tensor) -> list[int]:
    """Indices along dim 0 whose bits differ (``[0]`` for differing scalars or shapes)."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return [0]
    x, y = _bits(a), _bits(b)
    if x.dim() == 0:
        return [] if bool(x == y) else [0]
    return (x != y).reshape(x.shape[0], -1).any(1).nonzero().flatten().tolist()


def compare_runs(spec: OpSpec, case: Case, impl: str, first: dict, later: dict,
                 run: int, base: dict) -> list[dict]:
    """One row per output: does run ``run`` (2, 3, ...) reproduce the first run's bits?"""
    rows = []
    for name in spec.outputs:
        a, b = spec.canonical(name, first[name]), spec.canonical(name, later[name])
        tokens = differing_tokens(a, b)
        detail = ""
        if tokens:
            diff = ""
            if a.shape == b.shape and a.is_floating_point():
                gap = (a.double() - b.double()).abs().nan_to_num(nan=float("inf"))
                diff = f", max |diff| {gap.max().item():.3g}"
            detail = (f"nondeterministic: run {run} differs from run 1 in {len(tokens)} of "
                      f"{a.shape[0] if a.dim() else 1} tokens (first: "
                      f"{', '.join(map(str, tokens[:8]))}){diff}")
        rows.append({**base, "check": "determinism", "output": name,
                     "verdict": "fail" if tokens else "pass", "detail": detail,
                     "runs": run, "worst_token": tokens[0] if tokens else None})
    return rows


def check(spec: OpSpec, impl, case: Case, runs: int = 3) -> Finding:
    """``runs`` calls on the inputs of ``case``, each compared with the first and judged
    against the reference."""
    from harness.evaluate import evaluate

    ev = evaluate(spec, impl, case, runs=runs, check="determinism")
    problems = [r["detail"] for r in ev.rows if r["verdict"] != "pass"]
    return Finding("determinism", spec.op, impl.name, not problems,
                   "; ".join(problems[:3]) or f"{runs} runs on the same inputs are bitwise equal",
                   ev.rows)
