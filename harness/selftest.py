"""Self-test: every seeded fault must be flagged by its detector, and the shipped kernels, run
through the same detectors, must pass (the controls)."""

from __future__ import annotations

from typing import Callable

import pandas as pd

from harness import families
from harness.core.device import triton_interpreted
from harness.core.family import Probe
from harness.core.results import KNOWN_DEVIATION, Finding, result_row
from harness.detectors import (batch_invariance, config_invariance, cuda_graph, determinism, poison,
                               precision_growth)
from harness.profiles import INTERPRETER_MAX_TOKENS, Profile
from harness.core.registry import Implementation, records
from harness.core.cases import Case
from harness.core.specs import OpSpec, get_spec

PARTIAL_TILE_TOKENS = 33


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
}
"""The detectors every family can be judged by; families add their own probes
(harness.core.family.Probe), collected by :func:`runner`."""


def runner(detector: str) -> Callable[[OpSpec, Implementation, Profile, Case], Finding]:
    if detector in RUNNERS:
        return RUNNERS[detector]
    probe = families.probes().get(detector)
    if probe is None:
        raise KeyError(f"no detector or family probe named {detector!r}; known: "
                       f"{', '.join(sorted(RUNNERS) + sorted(families.probes()))}")
    return probe.run or _cases_runner(detector, probe)


def _cases_runner(detector: str, probe: Probe):
    def run(spec: OpSpec, impl: Implementation, profile: Profile, base: Case) -> Finding:
        return _probe_cases(spec, impl, base, probe.cases[spec.op], detector, probe.passes)
    return run


def run_detector(detector: str, impl: Implementation, profile: Profile, device: str,
                 hidden: int, seed: int = 0) -> Finding:
    spec = get_spec(impl.op)
    return runner(detector)(spec, impl, profile, Case(impl.op, hidden=hidden, seed=seed, device=device))


def controls() -> list[tuple[str, str]]:
    """(op, detector) pairs the faults exercise: the shipped kernels must pass each."""
    return sorted({(f.op, f.detector) for f in families.all_faults()})


def declared_not_capturable(impl: Implementation, detector: str) -> bool:
    """The CUDA-graph detector does not judge what declares itself not capturable (a torch
    reference reading lengths on the host): the declaration is the finding."""
    return detector == "cuda_graph" and impl.declared.get("cuda_graph", "").startswith(
        "not capturable")


def gpu_only(detector: str) -> bool:
    """Detectors that only run on a GPU (CUDA-graph capture)."""
    return any(f.needs_gpu for f in families.all_faults() if f.detector == detector)


def not_run_here(detector: str, device: str) -> str | None:
    """Why ``detector`` cannot run on ``device``, or None."""
    if gpu_only(detector) and not str(device).startswith("cuda"):
        return (f"{detector} runs only on a GPU (its seeded faults need one: a CUDA-graph "
                "capture, or tensors past 2^31 bytes or elements); run the self-test on a CUDA "
                "host")
    return None


def onsets(fault, profile: Profile) -> list[int]:
    """The token counts above which ``fault`` is built to break. A precision-growth fault is
    built at several: the baseline's edge, and two token counts inside the profile's sweep (an
    onset at T=4099 must be seen however many smaller T the baseline could have pooled)."""
    base = profile.baseline_max_tokens
    if fault.detector != "precision_growth":
        return [base]
    above = [t for t in sorted(profile.tokens) if t > base][:-1]  # a larger T must remain
    return sorted({base} | ({above[len(above) // 2], above[-1]} if above else set()))


def run(profile: Profile, device: str, hidden: int) -> pd.DataFrame:
    rows = []
    for f in families.all_faults():
        why = not_run_here(f.detector, device)
        if why:
            rows.append({"kind": "fault", "name": f.name, "op": f.op, "bug_class": f.bug_class,
                         "detector": f.detector, "ok": True, "result": "not run", "message": why})
            continue
        for onset in onsets(f, profile):
            finding = run_detector(f.detector, f.build(onset), profile, device, hidden)
            name = f.name if onset == profile.baseline_max_tokens else f"{f.name}@T>{onset}"
            rows.append({"kind": "fault", "name": name, "op": f.op, "bug_class": f.bug_class,
                         "detector": f.detector, "ok": not finding.passed,
                         "result": "caught" if not finding.passed else "MISSED",
                         "message": finding.message})
    for op, detector in controls():
        if not_run_here(detector, device):
            continue
        for name, impl in sorted(records(op).items()):
            if not impl.available or declared_not_capturable(impl, detector):
                continue
            finding = run_detector(detector, impl, profile, device, hidden)
            rows.append({"kind": "control", "name": name, "op": op, "bug_class": "",
                         "detector": detector, "ok": finding.passed,
                         "result": "passes" if finding.passed else "FLAGGED",
                         "message": finding.message})
    return pd.DataFrame(rows)
