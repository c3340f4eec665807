"""A kernel family as the harness sees it: one object per ``kernels/<family>`` package.

The engine collects families (``harness.families``) and never names one: a family brings its
ops (their specs and implementations register when the package is imported), the seeded faults
that prove its detectors fire, and the self-test probes those detectors run on.
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Mapping

from harness.core.detectors import Detector
from harness.core.faults import Fault, SeededFaults

ProbeCases = Mapping[str, tuple[tuple[int, tuple], ...]]
"""op -> (tokens, case params) of small cases a probe runs; a ``hidden`` entry among the params
sets the case's hidden size."""


@dataclasses.dataclass(frozen=True)
class Probe(Detector):
    """A detector the family defines: either ``cases`` per op, run through the evaluation
    (every output within tolerance, no known-deviation hidden), or its own ``run`` function
    ``(spec, impl, profile, base_case) -> Finding`` for checks that span several ops."""
    passes: str = ""
    """What holds when the check passes, as the self-test prints it."""
    cases: ProbeCases = dataclasses.field(default_factory=dict)
    run: Callable | None = None


@dataclasses.dataclass(frozen=True)
class Family:
    name: str
    ops: tuple[str, ...]
    faults: SeededFaults
    probes: tuple[Probe, ...] = ()
    """The family's own detectors (``topk_checks``, ...), which its faults point at."""

    def seeded_faults(self) -> list[Fault]:
        return list(self.faults)
