"""Seeded faults: one deliberately broken implementation per bug class, declared by the kernel
family whose contract it breaks (``kernels/<family>/faults.py``).

Each fault points at the detector that must catch it (a :class:`harness.core.detectors.Detector`:
a built-in one, or one of its family's probes). ``suites/test_detectors_fire.py`` (and the
self-test command) run the detector against the fault and assert it is flagged, and against
the correct kernels and assert they pass.
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Iterator

from harness.core.detectors import Detector
from harness.core.registries import Registry
from harness.core.registry import Implementation


@dataclasses.dataclass(frozen=True)
class Fault:
    name: str
    op: str
    bug_class: str
    detects: Detector
    """The detector that must catch it."""
    build: Callable[[int], Implementation]
    """Takes the profile's baseline_max_tokens (so T-triggered faults trigger above it)."""
    needs_gpu: bool = False
    """Its detector only runs on a GPU (CUDA-graph capture); elsewhere it is reported not run."""
    fuzz_max_elements: int | None = None
    """The case size (``OpSpec.case_elements``) its bug needs, where that is past the fuzzer's
    default cap: ``harness fuzz --faults`` raises the cap to it for this fault."""


    @property
    def detector(self) -> str:
        """The detector's name, as reports and result rows carry it."""
        return self.detects.name


class SeededFaults:
    """A family's faults, in declaration order; ``@FAULTS.seed(...)`` declares one."""

    def __init__(self) -> None:
        self._faults: Registry[Fault] = Registry("seeded fault")

    def seed(self, name: str, op: str, bug_class: str, detector: Detector,
             needs_gpu: bool = False, fuzz_max_elements: int | None = None):
        if not isinstance(detector, Detector):
            raise TypeError(f"fault {name}: name its detector by object (harness.core.detectors, "
                            f"or a family probe), not {detector!r}")

        def decorator(build: Callable[[int], Implementation]):
            self._faults.add(name, Fault(name, op, bug_class, detector, build, needs_gpu,
                                         fuzz_max_elements))
            return build
        return decorator

    def __iter__(self) -> Iterator[Fault]:
        return iter([fault for _, fault in self._faults.items()])
