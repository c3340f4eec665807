"""Run one implementation on one case and compare it with the float64 reference."""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

from harness.registry import Implementation
from harness.results import verdict
from harness.specs import Case, ContractViolation, OpSpec


@dataclasses.dataclass
class Evaluation:
    case: Case
    impl: str
    outputs: dict[str, torch.Tensor]
    rows: list[dict]

    @property
    def passed(self) -> bool:
        return bool(self.rows) and all(r["verdict"] == "pass" for r in self.rows)

    def failures(self) -> str:
        return "; ".join(f"{r['output']}: {r['detail']}" for r in self.rows
                         if r["verdict"] != "pass")


def case_fields(case: Case, impl: str, check: str) -> dict:
    return {"op": case.op, "impl": impl, "case": case.id, "tokens": case.tokens,
            "hidden": case.hidden, "check": check}


def evaluate(spec: OpSpec, impl: Implementation, case: Case, inputs: dict | None = None,
             ref: dict | None = None, check: str = "accuracy", **knobs: Any) -> Evaluation:
    """Outputs of ``impl`` on ``case`` and one comparison row per output.

    A contract violation by the implementation (wrong number of outputs, shapes, dtypes) is a
    failed comparison, not a crash: the harness reports it like any other wrong answer.
    """
    inputs = spec.make_inputs(case) if inputs is None else inputs
    ref = spec.reference(inputs) if ref is None else ref
    base = case_fields(case, impl.name, check)
    try:
        outputs = spec.run(impl.fn, inputs, **knobs)
    except ContractViolation as exc:
        return Evaluation(case, impl.name, {}, [{**base, "output": "*", "verdict": "fail",
                                                 "detail": str(exc)}])
    ref = spec.for_implementation(spec.refine_reference(inputs, outputs, ref), impl)
    rows = []
    for row in spec.compare(outputs, ref):
        passed = row.pop("passed")
        rows.append({**base, **row, "verdict": verdict(passed)})
    return Evaluation(case, impl.name, outputs, rows)
