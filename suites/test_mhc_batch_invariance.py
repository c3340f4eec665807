"""Batch invariance: a token's mHC output is the same alone, in a small batch and in a large one."""

import pytest

from harness.detectors import batch_invariance
from harness.core.ops import MHC_OPS

OPS = MHC_OPS


@pytest.mark.sweep("hidden")
def test_token_output_independent_of_batch(target, record):
    case = target.case.with_tokens(target.profile.batch_invariance_batch)
    finding = batch_invariance.check(target.spec, target.impl, case)
    record(finding.rows)
    assert finding.passed, finding.explain()
