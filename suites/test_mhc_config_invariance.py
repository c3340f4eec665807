"""Config invariance: n_splits (and any other declared knob) changes nothing beyond rounding."""

import pytest

from harness.detectors import config_invariance
from kernels.mhc.ops import MHC_OPS

OPS = MHC_OPS


@pytest.mark.sweep("hidden", tokens=[33])
def test_knobs_do_not_change_result(target, record):
    if not target.impl.knobs:
        pytest.skip(f"{target.impl.name} declares no config knobs for {target.op}")
    finding = config_invariance.check(target.spec, target.impl, target.case)
    record(finding.rows)
    finding.assert_passed()
