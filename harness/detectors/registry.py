"""The detectors by name, bound to their checks: what the self-test runs for a seeded fault
(``RUNNERS``: built-in detectors, then the families' probes) and what the fuzzer and replays run
on one case (``PER_CASE``). Names are those of the detector objects faults point at
(:mod:`harness.core.detectors`)."""

from __future__ import annotations

from typing import Callable

from harness import families
from harness.core import detectors as d
from harness.core.cases import Case
from harness.core.family import Probe
from harness.core.registries import Registry
from harness.core.registry import Implementation
from harness.core.results import Finding
from harness.core.specs import OpSpec
from harness.detectors import (batch_invariance, call_sequence, config_invariance, cuda_graph,
                               determinism, dispatch_thresholds, inputs_unchanged, layouts, poison,
                               precision_growth, probe_cases)
from harness.profiles import Profile

Runner = Callable[[OpSpec, Implementation, Profile, Case], Finding]
"""``(spec, impl, profile, base_case) -> Finding``: one detector run for the self-test."""

PARTIAL_TILE_TOKENS = 33

RUNNERS: Registry[Runner] = Registry("detector")
RUNNERS.add(d.PRECISION_GROWTH.name, lambda spec, impl, prof, base: precision_growth.check(
    spec, impl, [base.with_tokens(t) for t in prof.tokens], prof.baseline_max_tokens))
RUNNERS.add(d.BATCH_INVARIANCE.name, lambda spec, impl, prof, base: batch_invariance.check(
    spec, impl, base.with_tokens(prof.batch_invariance_batch)))
RUNNERS.add(d.POISONED_OUTPUTS.name, lambda spec, impl, prof, base: poison.check(
    spec, impl, base.with_tokens(PARTIAL_TILE_TOKENS)))
RUNNERS.add(d.CONFIG_INVARIANCE.name, lambda spec, impl, prof, base: config_invariance.check(
    spec, impl, base.with_tokens(PARTIAL_TILE_TOKENS)))
RUNNERS.add(d.INPUTS_UNCHANGED.name, lambda spec, impl, prof, base: inputs_unchanged.check(
    spec, impl, base.with_tokens(PARTIAL_TILE_TOKENS)))
RUNNERS.add(d.DETERMINISM.name, lambda spec, impl, prof, base: determinism.check(
    spec, impl, base.with_tokens(PARTIAL_TILE_TOKENS), runs=3))
RUNNERS.add(d.DISPATCH_THRESHOLDS.name, dispatch_thresholds.check)
RUNNERS.add(d.CUDA_GRAPH.name, lambda spec, impl, prof, base: cuda_graph.check(
    spec, impl, base.with_tokens(64)))
RUNNERS.add(d.LAYOUTS.name, lambda spec, impl, prof, base: layouts.check(spec, impl, base))
CALL_SEQUENCE_TOKENS = 4
RUNNERS.add(d.CALL_SEQUENCE.name, lambda spec, impl, prof, base: call_sequence.check_refilled(
    spec, impl, spec.small_case(base.with_tokens(CALL_SEQUENCE_TOKENS))))

PER_CASE: Registry[Callable[[OpSpec, Implementation, Case], Finding]] = Registry(
    "per-case detector")
"""Detectors that judge one case, ``check(spec, impl, case) -> Finding``: what the fuzzer runs
beside the evaluation and what replays a case one of them saved."""
PER_CASE.add(d.BATCH_INVARIANCE.name, batch_invariance.check)
PER_CASE.add(d.POISONED_OUTPUTS.name, poison.check)
PER_CASE.add(d.CONFIG_INVARIANCE.name, config_invariance.check)
PER_CASE.add(d.CUDA_GRAPH.name, cuda_graph.check)
PER_CASE.add(d.CALL_SEQUENCE.name, call_sequence.check)

if set(RUNNERS.names()) != {det.name for det in d.BUILT_IN}:
    raise RuntimeError("every built-in detector of harness.core.detectors needs a runner here")


def per_case_check(name: str) -> Callable[[OpSpec, Implementation, Case], Finding]:
    return PER_CASE.get(name)


def runner(detector: str) -> Runner:
    """A built-in detector's runner, else the family probe of that name."""
    if detector in RUNNERS:
        return RUNNERS.get(detector)
    probe = families.probes().get(detector)
    if probe is None:
        raise KeyError(f"no detector or family probe named {detector!r}; known: "
                       f"{', '.join(sorted(RUNNERS.names()) + sorted(families.probes()))}")
    return probe.run or _cases_runner(probe)


def _cases_runner(probe: Probe) -> Runner:
    def run(spec: OpSpec, impl: Implementation, profile: Profile, base: Case) -> Finding:
        return probe_cases.check(spec, impl, base, probe.cases[spec.op], probe.name,
                                 probe.passes)
    return run
