"""Detectors: reusable checks for the bug classes the harness exists to catch.

Each detector returns a :class:`harness.core.results.Finding`; suites assert ``finding.passed`` and record
``finding.rows``. The self-tests in ``suites/test_detectors_fire.py`` feed each one a deliberately
broken implementation to show it fires.
"""

from __future__ import annotations

import importlib
from typing import Callable

import torch

PER_CASE = {
    "batch_invariance": "harness.detectors.batch_invariance",
    "poisoned_outputs": "harness.detectors.poison",
    "config_invariance": "harness.detectors.config_invariance",
    "cuda_graph": "harness.detectors.cuda_graph",
}
"""Detectors that judge one case, ``check(spec, impl, case) -> Finding``, by name: what the
fuzzer runs beside the evaluation and what replays a case one of them saved."""


def per_case_check(name: str) -> Callable:
    return importlib.import_module(PER_CASE[name]).check


def outputs_agree(spec, a: dict, b: dict, bitwise: bool) -> list[str]:
    """Problems found comparing two runs' outputs (through the spec's canonical view): bitwise,
    or within the op tolerance (integer outputs, such as top-k indices, always exactly)."""
    bad = []
    for name in spec.outputs:
        x, y = spec.canonical(name, a[name]), spec.canonical(name, b[name])
        if bitwise or not x.is_floating_point():
            if not torch.equal(x, y):
                diff = (x.double() - y.double()).abs().max().item() if x.shape == y.shape else None
                bad.append(f"{name} not bitwise equal (max diff {diff})")
        else:
            tol = spec.tolerance(name)
            try:
                torch.testing.assert_close(x.double(), y.double(), atol=tol.atol, rtol=tol.rtol,
                                           equal_nan=False)
            except AssertionError as exc:
                bad.append(f"{name}: {str(exc).splitlines()[0]}")
    return bad
