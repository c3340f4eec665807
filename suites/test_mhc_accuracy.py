"""Every available mHC implementation against the float64 reference, across the profile's token
counts, hidden sizes and seeds."""

import pytest

from harness.evaluate import evaluate
from harness.ops import MHC_OPS

OPS = MHC_OPS


@pytest.mark.sweep("tokens", "hidden", "seed")
def test_matches_reference(target, record):
    ev = evaluate(target.spec, target.impl, target.case)
    record(ev.rows)
    assert ev.passed, f"{target.case.id} [{target.impl.name}]: {ev.failures()}"
