"""Detectors: reusable checks for the bug classes the harness exists to catch, one module each.

Each returns a :class:`harness.core.results.Finding`; suites assert ``finding.passed`` and record
``finding.rows``. :mod:`harness.detectors.registry` binds them to the detector objects that
seeded faults point at (:mod:`harness.core.detectors`) for the self-test, the fuzzer and replays;
``suites/test_detectors_fire.py`` feeds each one a deliberately broken implementation.
"""

from __future__ import annotations

from harness.detectors.compare import outputs_agree

__all__ = ["outputs_agree"]

