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

from harness.core.results import Finding
from harness.core.cases import Case
from harness.core.specs import OpSpec
from harness.evaluate import evaluate

def check(spec: OpSpec, impl, case: Case, runs: int = 3) -> Finding:
    """``runs`` calls on the inputs of ``case``, each compared with the first and judged
    against the reference."""
    ev = evaluate(spec, impl, case, runs=runs, check="determinism")
    problems = [r["detail"] for r in ev.rows if r["verdict"] != "pass"]
    return Finding("determinism", spec.op, impl.name, not problems,
                   "; ".join(problems[:3]) or f"{runs} runs on the same inputs are bitwise equal",
                   ev.rows)
