"""One drawn case judged as the suites judge it: the evaluation (every output against the
float64 reference, guard rows, untouched inputs, a second run bitwise equal to the first) and
the per-case detectors the op's seeded faults prove sound for it (batch invariance, poisoned
allocations, knobs, CUDA-graph replays on a GPU).

Detectors that compare across token counts (precision growth) or span several ops (the indexer
step) have no meaning on one case: :func:`not_fuzzable` says so for the report.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

import torch

from harness import families
from harness.core import call_sequences
from harness.core.cases import Case
from harness.core.detectors import CALL_SEQUENCE
from harness.core.errors import out_of_memory_errors
from harness.core.registry import Implementation
from harness.core.results import result_row
from harness.core.specs import OpSpec
from harness.detectors.registry import PER_CASE, per_case_check
from harness.evaluate import evaluate
from harness.core.verdicts import failure_kind

EVALUATED = ("accuracy", "dispatch_thresholds", "inputs_unchanged", "determinism")
"""Detectors whose check the evaluation of a drawn case already makes."""
GPU_ONLY = ("cuda_graph",)


def not_fuzzable(detector: str) -> str | None:
    """Why a fault caught by ``detector`` is out of the fuzzer's reach, or None."""
    if detector in EVALUATED or detector in PER_CASE:
        return None
    probe = families.probes().get(detector)
    if probe is not None and probe.run is None:
        return None
    if detector == "precision_growth":
        return ("precision growth compares a kernel's error at large T with its own error at "
                "small T; one case within the op's bound passes by design")
    return f"{detector} spans several ops or calls; it is not a property of one case"


def detectors_for(impl: Implementation, device: str) -> tuple[str, ...]:
    """The per-case detectors the op's seeded faults prove sound for it; the CUDA-graph one only
    on a GPU and not for what declares itself not capturable (the declaration is the finding)."""
    names = {f.detector for f in families.all_faults() if f.op == impl.op} & set(PER_CASE.names())
    if not str(device).startswith("cuda"):
        names -= set(GPU_ONLY)
    if impl.declared.get("cuda_graph", "").startswith("not capturable"):
        names.discard("cuda_graph")
    return tuple(sorted(names))


class Unjudgeable(Exception):
    """The harness cannot build this case (inputs or reference) or the implementation declares
    it unsupported: not a finding, the draw is discarded and counted."""


@dataclasses.dataclass
class Failure:
    case: Case
    impl: str
    check: str
    rows: list[dict]
    evidence: dict[str, Any] | None = None
    """inputs, reference, outputs, knobs and runs of an evaluation, for its case file."""

    @property
    def signature(self) -> tuple[str, str, str]:
        """(check, output, kind of failure): shrinking keeps to it, the report groups by it."""
        row = self.rows[0]
        output = re.sub(r"\d+", "", str(row.get("output", "*")).split("/")[0])
        return (self.check, output, failure_kind(row))

    @property
    def detail(self) -> str:
        return "; ".join(f"{r.get('output')}: {r.get('detail')}" for r in self.rows)


class Judge:
    def __init__(self, spec: OpSpec, impl: Implementation, device: str, runs: int = 2,
                 detectors: tuple[str, ...] | None = None):
        self.spec, self.impl, self.device, self.runs = spec, impl, device, runs
        self.detectors = detectors_for(impl, device) if detectors is None else detectors

    def __call__(self, case: Case) -> list[Failure]:
        try:
            return self._judge(case)
        finally:
            if str(self.device).startswith("cuda"):
                torch.cuda.empty_cache()  # a case's buffers must not crowd out the next one's

    def _judge(self, case: Case) -> list[Failure]:
        unsupported = self.impl.unsupported_for(case)
        if unsupported:
            raise Unjudgeable(f"declared unsupported: {unsupported[0].reason}")
        try:
            inputs = self.spec.make_inputs(case)
            ref = self.spec.reference(inputs)
        except (ValueError, *out_of_memory_errors()) as exc:
            raise Unjudgeable(f"the harness cannot build it: {type(exc).__name__}: {exc}") from exc
        failures = []
        ev = self._guarded("accuracy", case, lambda: evaluate(
            self.spec, self.impl, case, inputs=inputs, ref=ref, runs=self.runs))
        if isinstance(ev, Failure):
            failures.append(ev)
        else:
            by_check: dict[str, list[dict]] = {}
            for row in ev.rows:
                if row["verdict"] == "fail":
                    by_check.setdefault(row["check"], []).append(row)
            failures += [Failure(case, self.impl.name, check, rows,
                                 {"inputs": inputs, "reference": ref, "outputs": ev.outputs,
                                  "runs": self.runs}) for check, rows in by_check.items()]
        for name in self._detectors(case, single_call_failed=bool(failures)):
            finding = self._guarded(name, case, lambda n=name: per_case_check(n)(
                self.spec, self.impl, case))
            if isinstance(finding, Failure):
                failures.append(finding)
            elif not finding.passed:
                rows = [r for r in finding.rows if r.get("verdict") == "fail"] or [
                    result_row(case, self.impl.name, name, "*", passed=False,
                               detail=finding.message)]
                failures.append(Failure(case, self.impl.name, name, rows))
        return failures

    def _detectors(self, case: Case, single_call_failed: bool) -> tuple[str, ...]:
        """The judge's detectors, and the call-sequence one where the drawn case is a run of
        calls (``calls``: harness.core.call_sequences) whose single call passed (a wrong first
        call is the evaluation's finding: shrinking keeps to it)."""
        drawn = case.param(call_sequences.PARAM, call_sequences.ONE)
        if drawn == call_sequences.ONE or single_call_failed:
            return self.detectors
        return tuple(dict.fromkeys(self.detectors + (CALL_SEQUENCE.name,)))

    def _guarded(self, check: str, case: Case, call):
        """``call()``, or the exception the implementation raised as a failure of ``check``."""
        try:
            return call()
        except Unjudgeable:
            raise
        except out_of_memory_errors() as exc:  # a detector's own copies and graph pools
            raise Unjudgeable(f"the harness ran out of device memory in {check}") from exc
        except Exception as exc:  # the implementation crashed: a finding, not a harness error
            detail = f"raised {type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}"
            return Failure(case, self.impl.name, check,
                           [result_row(case, self.impl.name, check, "*", passed=False,
                                       detail=detail)])
