"""Layouts: the op's small case (``OpSpec.layout_probe``) in every layout but the contiguous one
(harness.core.layouts), each judged by the evaluation: outputs within tolerance, inputs and the
parent buffers around their views untouched, a declared requirement refused clearly. An error
raised on a view the implementation did not declare it refuses is a finding too."""

from __future__ import annotations

from harness.core import layouts
from harness.core.cases import Case
from harness.core.detectors import LAYOUTS
from harness.core.device import triton_interpreted
from harness.core.registry import Implementation
from harness.core.results import KNOWN_DEVIATION, Finding, result_row
from harness.core.specs import OpSpec


def cases(spec: OpSpec, base: Case) -> list[Case]:
    tokens, params = spec.layout_probe
    return [Case(spec.op, tokens=tokens, hidden=base.hidden, seed=base.seed, device=base.device,
                 params=tuple(params) + ((layouts.PARAM, name),))
            for name in layouts.NAMES if name != layouts.CONTIGUOUS]


def check(spec: OpSpec, impl: Implementation, base: Case) -> Finding:
    from harness.evaluate import evaluate

    rows, problems = [], []
    interpreted = impl.triton and triton_interpreted()
    for case in cases(spec, base):
        why = [u.reason for u in impl.unsupported_for(case)]
        why += [layouts.interpreter_blind(case)] if interpreted else []
        if any(why):
            rows.append(result_row(case, impl.name, LAYOUTS.name, "*", verdict="not run",
                                   detail=f"not judged: {next(w for w in why if w)}"))
            continue
        try:
            ev = evaluate(spec, impl, case, check=LAYOUTS.name)
        except Exception as exc:  # an undeclared refusal, or a crash on the view
            detail = f"raised on layout {case.param(layouts.PARAM)}: {type(exc).__name__}: {exc}"
            rows.append(result_row(case, impl.name, LAYOUTS.name, "*", passed=False,
                                   detail=detail))
            problems.append(f"{case.id}: {detail}")
            continue
        rows += ev.rows
        failed = [r for r in ev.rows if r["verdict"] not in ("pass", KNOWN_DEVIATION)]
        if failed:
            problems.append(f"{case.id}: {ev.failures()}")
    return Finding(LAYOUTS.name, spec.op, impl.name, not problems,
                   "; ".join(problems) or "every layout matches the reference and leaves the "
                   "parent buffers around its views untouched", rows)
