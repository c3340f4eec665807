"""Poisoned outputs: every element of every mHC output is written, at token counts that leave
partial tiles."""

import pytest

from harness.detectors import poison
from harness.ops import MHC_OPS

OPS = MHC_OPS


@pytest.mark.sweep("hidden", tokens=[7, 33])
def test_every_output_element_written(target, record):
    finding = poison.check(target.spec, target.impl, target.case)
    record(finding.rows)
    assert finding.passed, finding.explain()
