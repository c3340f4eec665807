"""Self-test: every seeded fault must be flagged by its detector, and the shipped kernels, run
through the same detectors, must pass (the controls)."""

from __future__ import annotations

import pandas as pd

from harness import families
from harness.core.cases import Case
from harness.core.detectors import CUDA_GRAPH, PRECISION_GROWTH
from harness.core.registry import Implementation, records
from harness.core.results import Finding
from harness.core.specs import get_spec
from harness.detectors.registry import runner
from harness.profiles import Profile


def run_detector(detector: str, impl: Implementation, profile: Profile, device: str,
                 hidden: int, seed: int = 0) -> Finding:
    spec = get_spec(impl.op)
    return runner(detector)(spec, impl, profile, Case(impl.op, hidden=hidden, seed=seed, device=device))


def controls() -> list[tuple[str, str]]:
    """(op, detector) pairs the faults exercise: the shipped kernels must pass each."""
    return sorted({(f.op, f.detector) for f in families.all_faults()})


VENDOR_SOURCE = "harness.adapters."


def control_implementations(op: str, detector: str) -> list[tuple[str, Implementation]]:
    """The implementations of ``op`` that must pass ``detector``: those that run here, are not
    declared out of its reach, and are not a vendor's. A vendor release is judged by the suites
    and shown in the matrix; as a control, its real disagreement (AITER 0.1.7's prefill logits
    written past their window) would read as the detector's false alarm."""
    return [(name, impl) for name, impl in sorted(records(op).items())
            if impl.available and not declared_not_capturable(impl, detector)
            and not (impl.source or "").startswith(VENDOR_SOURCE)]


def declared_not_capturable(impl: Implementation, detector: str) -> bool:
    """The CUDA-graph detector does not judge what declares itself not capturable (a torch
    reference reading lengths on the host): the declaration is the finding."""
    return detector == CUDA_GRAPH.name and impl.declared.get("cuda_graph", "").startswith(
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
    if fault.detects != PRECISION_GROWTH:
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
        for name, impl in control_implementations(op, detector):
            finding = run_detector(detector, impl, profile, device, hidden)
            rows.append({"kind": "control", "name": name, "op": op, "bug_class": "",
                         "detector": detector, "ok": finding.passed,
                         "result": "passes" if finding.passed else "FLAGGED",
                         "message": finding.message})
    return pd.DataFrame(rows)
