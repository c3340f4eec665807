"""Inputs unchanged: every input comes back as it was given, and nothing is written past an
input's last token (the evaluation's own checks, run as a detector for the self-test)."""

from __future__ import annotations

from harness.core.cases import Case
from harness.core.registry import Implementation
from harness.core.results import Finding
from harness.core.specs import OpSpec


def check(spec: OpSpec, impl: Implementation, case: Case) -> Finding:
    """The evaluation's own checks: every input comes back byte for byte as it was given, and
    nothing was written into the guard rows after the last token of an input."""
    from harness.evaluate import evaluate

    ev = evaluate(spec, impl, case, check="inputs_unchanged")
    clobbered = [r["detail"] for r in ev.rows if r.get("output") in ("inputs", "guard")]
    return Finding("inputs_unchanged", spec.op, impl.name, not clobbered,
                   "; ".join(clobbered) or "inputs come back untouched", ev.rows)
