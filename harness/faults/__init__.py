"""The harness's own seeded faults: one deliberately broken implementation per bug class.

Each fault names the detector that must catch it. ``suites/test_detectors_fire.py`` (and the
self-test command) run the detector against the fault and assert it is flagged, and against
the correct kernels and assert they pass.
"""

from __future__ import annotations

import dataclasses
from typing import Callable

from harness.registry import Implementation


@dataclasses.dataclass(frozen=True)
class Fault:
    name: str
    op: str
    bug_class: str
    detector: str
    build: Callable[[int], Implementation]
    """Takes the profile's baseline_max_tokens (so T-triggered faults trigger above it)."""
    needs_gpu: bool = False
    """Its detector only runs on a GPU (CUDA-graph capture); elsewhere it is reported not run."""


FAULTS: list[Fault] = []


def fault(name: str, op: str, bug_class: str, detector: str, needs_gpu: bool = False):
    def decorator(build: Callable[[int], Implementation]):
        FAULTS.append(Fault(name, op, bug_class, detector, build, needs_gpu))
        return build
    return decorator


def all_faults() -> list[Fault]:
    from harness.faults import indexer, mhc, topk  # noqa: F401

    return list(FAULTS)
