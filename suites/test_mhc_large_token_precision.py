"""Large-token precision: per-token error must not grow with the token count (the class of the
ROCm AITER mHC kernel that vLLM PR 42810 disabled)."""

import pytest

from harness.detectors import precision_growth
from harness.ops import MHC_OPS

OPS = MHC_OPS


@pytest.mark.sweep("hidden")
def test_error_does_not_grow_with_tokens(target, record):
    cases = [target.case.with_tokens(t) for t in target.profile.tokens]
    finding = precision_growth.check(target.spec, target.impl, cases,
                                     target.profile.baseline_max_tokens)
    record(finding.rows)
    assert finding.passed, finding.explain()
