"""Large-token precision: per-token error must not grow with the token count (the class of the
ROCm AITER mHC kernel that vLLM PR 42810 disabled)."""

import pytest

from harness.core.device import triton_interpreted
from harness.detectors import precision_growth
from kernels.mhc.ops import MHC_OPS

OPS = MHC_OPS


@pytest.mark.sweep("hidden")
def test_error_does_not_grow_with_tokens(target, record):
    smallest = min(target.profile.hidden)
    if target.impl.triton and triton_interpreted() and target.case.hidden != smallest:
        pytest.skip(f"{target.impl.name} launches Triton kernels, which the CPU interprets in "
                    f"numpy's fp32 (a minute a hidden size): growth with T is judged here at "
                    f"H={smallest}, and at the production sizes on a GPU (--profile ci/nightly)")
    cases = [target.case.with_tokens(t) for t in target.profile.tokens]
    finding = precision_growth.check(target.spec, target.impl, cases,
                                     target.profile.baseline_max_tokens)
    record(finding.rows)
    assert finding.passed, finding.explain()


def test_bf16_growth_inside_the_accuracy_tolerance_is_flagged():
    """A large-T path that forms a bf16 output from bf16 products stays inside that output's
    absolute bound at T=64 (the accuracy suite passes it), yet 38% of its elements are an ulp
    off: growth judged in ulps (the misrounded share) flags it. CPU: the claim is about these
    inputs, drawn by the CPU generator."""
    from harness.evaluate import evaluate
    from kernels.mhc.faults import bf16_products_above_t
    from harness.core.cases import Case
    from harness.core.specs import get_spec

    spec, fault = get_spec("mhc_pre"), bf16_products_above_t(7)
    cases = [Case("mhc_pre", tokens=t, hidden=64) for t in (1, 2, 7, 33, 64)]
    assert evaluate(spec, fault, cases[-1]).passed, "the fault should hide from the accuracy test"
    finding = precision_growth.check(spec, fault, cases, baseline_max_tokens=7)
    assert not finding.passed and "layer_input: 3" in finding.message, finding.message
    assert "not correctly rounded at T=64" in finding.message, finding.message
