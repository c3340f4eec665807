"""Self-test: every seeded fault must be flagged by its detector, and the shipped kernels, run
through the same detectors, must pass (the controls)."""

from __future__ import annotations

from typing import Callable

import pandas as pd

from harness.detectors import Finding, batch_invariance, config_invariance, poison, precision_growth
from harness.faults import all_faults
from harness.profiles import Profile
from harness.registry import Implementation, records
from harness.specs import Case, OpSpec, get_spec

PARTIAL_TILE_TOKENS = 33

TOPK_PROBES = {
    "top_k_per_row_prefill": [(37, (("k", 16), ("n", 40), ("seqs", 3), ("clean", False))),
                              (20, (("k", 16), ("n", 30), ("seqs", 2), ("data", "ties")))],
    "top_k_per_row_decode": [(12, (("k", 16), ("n", 60), ("next_n", 2), ("pad", 3))),
                             (16, (("k", 16), ("n", 60), ("next_n", 4), ("clean", False)))],
}
"""Small cases with row_starts > 0, rows both shorter and longer than k, next_n > 1, graph
padding and uncleaned tails: enough to expose every top-k index-contract and slicing fault."""


def topk_checks(spec: OpSpec, impl: Implementation, profile: Profile, base: Case) -> Finding:
    from harness.evaluate import evaluate

    rows, problems = [], []
    for tokens, params in TOPK_PROBES[spec.op]:
        ev = evaluate(spec, impl, Case(spec.op, tokens, 0, base.seed, base.device, params),
                      check="topk_checks")
        rows += ev.rows
        if not ev.passed:
            problems.append(f"{ev.case.id}: {ev.failures()}")
    message = "; ".join(problems) if problems else "contract, ties and guard bands hold"
    return Finding("topk_checks", spec.op, impl.name, not problems, message, rows)


RUNNERS: dict[str, Callable[[OpSpec, Implementation, Profile, Case], Finding]] = {
    "precision_growth": lambda spec, impl, prof, base: precision_growth.check(
        spec, impl, [base.with_tokens(t) for t in prof.tokens], prof.baseline_max_tokens),
    "batch_invariance": lambda spec, impl, prof, base: batch_invariance.check(
        spec, impl, base.with_tokens(prof.batch_invariance_batch)),
    "poisoned_outputs": lambda spec, impl, prof, base: poison.check(
        spec, impl, base.with_tokens(PARTIAL_TILE_TOKENS)),
    "config_invariance": lambda spec, impl, prof, base: config_invariance.check(
        spec, impl, base.with_tokens(PARTIAL_TILE_TOKENS)),
    "topk_checks": topk_checks,
}


def run_detector(detector: str, impl: Implementation, profile: Profile, device: str,
                 hidden: int, seed: int = 0) -> Finding:
    spec = get_spec(impl.op)
    return RUNNERS[detector](spec, impl, profile, Case(impl.op, 0, hidden, seed, device))


def controls() -> list[tuple[str, str]]:
    """(op, detector) pairs the faults exercise: the shipped kernels must pass each."""
    return sorted({(f.op, f.detector) for f in all_faults()})


def run(profile: Profile, device: str, hidden: int) -> pd.DataFrame:
    rows = []
    for f in all_faults():
        finding = run_detector(f.detector, f.build(profile.baseline_max_tokens), profile, device,
                               hidden)
        rows.append({"kind": "fault", "name": f.name, "op": f.op, "bug_class": f.bug_class,
                     "detector": f.detector, "ok": not finding.passed,
                     "result": "caught" if not finding.passed else "MISSED",
                     "message": finding.message})
    for op, detector in controls():
        for name, impl in sorted(records(op).items()):
            if not impl.available:
                continue
            finding = run_detector(detector, impl, profile, device, hidden)
            rows.append({"kind": "control", "name": name, "op": op, "bug_class": "",
                         "detector": detector, "ok": finding.passed,
                         "result": "passes" if finding.passed else "FLAGGED",
                         "message": finding.message})
    return pd.DataFrame(rows)
