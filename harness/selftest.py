"""Self-test: every seeded fault must be flagged by its detector, and the shipped kernels, run
through the same detectors, must pass (the controls)."""

from __future__ import annotations

from typing import Callable

import pandas as pd

from harness.detectors import (Finding, batch_invariance, config_invariance, cuda_graph, determinism,
                               poison, precision_growth)
from harness.device import triton_interpreted
from harness.faults import all_faults
from harness.profiles import INTERPRETER_MAX_TOKENS, Profile
from harness.registry import Implementation, records
from harness.results import KNOWN_DEVIATION
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
    return _probe_cases(spec, impl, base, TOPK_PROBES[spec.op], "topk_checks",
                        "contract, ties and guard bands hold")


INDEXER_PROBES = {
    "fp8_quantize_k": [(37, ()), (9, (("scale_fmt", "ue8m0"),))],
    "fp8_quantize_q": [(13, (("heads", 4),))],
    "indexer_k_quant_and_cache": [(70, ()), (20, (("scale_fmt", "ue8m0"),))],
    "fp8_mqa_logits": [(29, (("heads", 4), ("seqs", 3), ("n", 200))),
                       (16, (("heads", 8), ("seqs", 1), ("n", 0)))],
    "fp8_paged_mqa_logits": [(12, (("heads", 4), ("next_n", 2), ("n", 300))),
                             (7, (("heads", 4), ("n", 130)))],
}
"""Small indexer cases: ragged windows with context, a query row that sees a single key, next_n
draft rows, shuffled block tables over a cache full of garbage bytes."""

STEP_PROBES = [
    (("batch", 3), ("next_n", 2), ("pad", 2), ("prefill", 9), ("seqs", 2), ("n", 300),
     ("heads", 4), ("k", 32)),
    (("batch", 2), ("next_n", 4), ("pad", 1), ("n", 200), ("heads", 4), ("k", 16),
     ("data", "exact")),
]
"""Mixed prefill + decode with graph padding and next_n > 1; the exact-data step must select the
reference's top-k up to ties."""


def indexer_checks(spec: OpSpec, impl: Implementation, profile: Profile, base: Case) -> Finding:
    return _probe_cases(spec, impl, base, INDEXER_PROBES[spec.op], "indexer_checks",
                        "bit-exact quantisation, mask and logits bounds hold")


def indexer_step(spec: OpSpec, impl: Implementation, profile: Profile, base: Case) -> Finding:
    """The whole indexer step with ``impl`` as its ``impl.op`` piece (every other piece from the
    same implementation name where it exists, else the torch reference)."""
    from kernels.sparse_indexer.step import STEP_OPS, decode_rows, judge_step, make_step, \
        reference_step, run_step

    impls = {}
    for op in STEP_OPS:
        rec = records(op).get(impl.name)
        impls[op] = rec.fn if rec is not None and rec.available else records(op)["torch"].fn
    impls[impl.op] = impl.fn
    view = getattr(impl.fn, "step_decode_view", decode_rows)
    rows, problems = [], []
    for params in STEP_PROBES:
        case = Case("fp8_paged_mqa_logits", 0, 0, base.seed, base.device, params)
        batch = make_step(case)
        try:
            row = judge_step(batch, run_step(batch, impls, decode_view=view), reference_step(batch))
        except Exception as exc:  # a crash of the step is a finding, not a pass
            row = {"passed": False, "detail": f"step raised {type(exc).__name__}: {exc}"}
        rows.append({"op": impl.op, "impl": impl.name, "case": case.id, "check": "indexer_step",
                     "output": "topk_indices_buffer", **row,
                     "verdict": "pass" if row["passed"] else "fail"})
        if not row["passed"]:
            problems.append(f"{case.id}: {row['detail']}")
    message = "; ".join(problems) if problems else "step selects the top-k, padding rows -1, guards intact"
    return Finding("indexer_step", impl.op, impl.name, not problems, message, rows)


def inputs_unchanged(spec: OpSpec, impl: Implementation, case: Case) -> Finding:
    """The evaluation's own checks: every input comes back byte for byte as it was given, and
    nothing was written into the guard rows after the last token of an input."""
    from harness.evaluate import evaluate

    ev = evaluate(spec, impl, case, check="inputs_unchanged")
    clobbered = [r["detail"] for r in ev.rows if r.get("output") in ("inputs", "guard")]
    return Finding("inputs_unchanged", spec.op, impl.name, not clobbered,
                   "; ".join(clobbered) or "inputs come back untouched", ev.rows)


def dispatch_thresholds(spec: OpSpec, impl: Implementation, profile: Profile, base: Case) -> Finding:
    """The accuracy check at the profile's dispatch token counts (Triton kernels under the CPU
    interpreter only up to INTERPRETER_MAX_TOKENS; the message says which counts ran)."""
    tokens = [t for t in profile.dispatch_tokens
              if not (impl.triton and triton_interpreted() and t > INTERPRETER_MAX_TOKENS)]
    return _probe_cases(spec, impl, base, [(t, ()) for t in tokens], "dispatch_thresholds",
                        f"matches the reference at T={', '.join(map(str, tokens))}",
                        hidden=base.hidden)


def _probe_cases(spec, impl, base, probes, check, ok_message, hidden: int = 0) -> Finding:
    from harness.evaluate import evaluate

    rows, problems, known = [], [], []
    for tokens, params in probes:
        ev = evaluate(spec, impl, Case(spec.op, tokens, hidden, base.seed, base.device, params),
                      check=check)
        rows += ev.rows
        if any(r["verdict"] == KNOWN_DEVIATION for r in ev.rows):
            known.append(ev.case.id)
        if any(r["verdict"] == "fail" for r in ev.rows):
            problems.append(f"{ev.case.id}: {ev.failures()}")
    note = f" (known deviation of {impl.name} reported apart at {', '.join(known)})" if known else ""
    return Finding(check, spec.op, impl.name, not problems,
                   ("; ".join(problems) if problems else ok_message) + note, rows)


RUNNERS: dict[str, Callable[[OpSpec, Implementation, Profile, Case], Finding]] = {
    "precision_growth": lambda spec, impl, prof, base: precision_growth.check(
        spec, impl, [base.with_tokens(t) for t in prof.tokens], prof.baseline_max_tokens),
    "batch_invariance": lambda spec, impl, prof, base: batch_invariance.check(
        spec, impl, base.with_tokens(prof.batch_invariance_batch)),
    "poisoned_outputs": lambda spec, impl, prof, base: poison.check(
        spec, impl, base.with_tokens(PARTIAL_TILE_TOKENS)),
    "config_invariance": lambda spec, impl, prof, base: config_invariance.check(
        spec, impl, base.with_tokens(PARTIAL_TILE_TOKENS)),
    "inputs_unchanged": lambda spec, impl, prof, base: inputs_unchanged(
        spec, impl, base.with_tokens(PARTIAL_TILE_TOKENS)),
    "determinism": lambda spec, impl, prof, base: determinism.check(
        spec, impl, base.with_tokens(PARTIAL_TILE_TOKENS), runs=3),
    "dispatch_thresholds": dispatch_thresholds,
    "cuda_graph": lambda spec, impl, prof, base: cuda_graph.check(spec, impl, base.with_tokens(64)),
    "topk_checks": topk_checks,
    "indexer_checks": indexer_checks,
    "indexer_step": indexer_step,
}


def run_detector(detector: str, impl: Implementation, profile: Profile, device: str,
                 hidden: int, seed: int = 0) -> Finding:
    spec = get_spec(impl.op)
    return RUNNERS[detector](spec, impl, profile, Case(impl.op, 0, hidden, seed, device))


def controls() -> list[tuple[str, str]]:
    """(op, detector) pairs the faults exercise: the shipped kernels must pass each."""
    return sorted({(f.op, f.detector) for f in all_faults()})


def gpu_only(detector: str) -> bool:
    """Detectors that only run on a GPU (CUDA-graph capture)."""
    return any(f.needs_gpu for f in all_faults() if f.detector == detector)


def not_run_here(detector: str, device: str) -> str | None:
    """Why ``detector`` cannot run on ``device``, or None."""
    if gpu_only(detector) and not str(device).startswith("cuda"):
        return f"{detector} needs a GPU (CUDA-graph capture); run the self-test on a CUDA host"
    return None


def run(profile: Profile, device: str, hidden: int) -> pd.DataFrame:
    rows = []
    for f in all_faults():
        why = not_run_here(f.detector, device)
        if why:
            rows.append({"kind": "fault", "name": f.name, "op": f.op, "bug_class": f.bug_class,
                         "detector": f.detector, "ok": True, "result": "not run", "message": why})
            continue
        finding = run_detector(f.detector, f.build(profile.baseline_max_tokens), profile, device,
                               hidden)
        rows.append({"kind": "fault", "name": f.name, "op": f.op, "bug_class": f.bug_class,
                     "detector": f.detector, "ok": not finding.passed,
                     "result": "caught" if not finding.passed else "MISSED",
                     "message": finding.message})
    for op, detector in controls():
        if not_run_here(detector, device):
            continue
        for name, impl in sorted(records(op).items()):
            if not impl.available:
                continue
            finding = run_detector(detector, impl, profile, device, hidden)
            rows.append({"kind": "control", "name": name, "op": op, "bug_class": "",
                         "detector": detector, "ok": finding.passed,
                         "result": "passes" if finding.passed else "FLAGGED",
                         "message": finding.message})
    return pd.DataFrame(rows)
