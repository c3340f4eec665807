"""A detector made of small cases run through the evaluation: every output within tolerance,
known deviations reported apart (the family probes' and the dispatch-threshold detector's)."""

from __future__ import annotations

from harness.core.cases import Case
from harness.core.results import KNOWN_DEVIATION, Finding, result_row


def check(spec, impl, base, probes, check, ok_message, hidden: int = 0) -> Finding:
    from harness.evaluate import evaluate

    rows, problems, known = [], [], []
    for tokens, params in probes:
        params = dict(params)
        case = Case(spec.op, tokens=tokens, hidden=params.pop("hidden", hidden), seed=base.seed,
                    device=base.device, params=tuple(params.items()))
        unsupported = impl.unsupported_for(case)
        if unsupported:
            rows.append(result_row(case, impl.name, check, "*", verdict="not run",
                                   detail=f"not judged: {unsupported[0].reason}"))
            continue
        ev = evaluate(spec, impl, case, check=check)
        rows += ev.rows
        if any(r["verdict"] == KNOWN_DEVIATION for r in ev.rows):
            known.append(ev.case.id)
        if any(r["verdict"] == "fail" for r in ev.rows):
            problems.append(f"{ev.case.id}: {ev.failures()}")
    note = f" (known deviation of {impl.name} reported apart at {', '.join(known)})" if known else ""
    return Finding(check, spec.op, impl.name, not problems,
                   ("; ".join(problems) if problems else ok_message) + note, rows)
