"""A/B: two implementations of one op compared with each other (and each with the reference)
across the profile's token counts, e.g. the same kernel from two builds loaded with two
--impl-module paths: ``pytest suites/test_ab_compare.py --ab old,new``. mHC ops for now: top-k
outputs legitimately differ on ties, so there the reference comparison is the A/B check."""

import pytest

from harness.core.device import default_device
from harness.detectors import outputs_agree
from harness.evaluate import evaluate
from kernels.mhc.ops import MHC_OPS
from harness.profiles import get_profile
from harness.core.registry import records
from harness.core.cases import Case
from harness.core.specs import get_spec

AB_HIDDEN = {"smoke": 64}


def pytest_generate_tests(metafunc):
    if "ab_case" not in metafunc.fixturenames:
        return
    config = metafunc.config
    pair = config.getoption("ab")
    if not pair:
        metafunc.parametrize("ab_case", [pytest.param(None, marks=pytest.mark.skip(
            reason="A/B mode is off; pass --ab A,B to compare two implementations"))])
        return
    a, b = pair.split(",")
    profile = get_profile(config.getoption("profile"))
    dev = config.getoption("device") or default_device()
    params = []
    for op in MHC_OPS:
        impls = records(op)
        if a in impls and b in impls:
            hidden = AB_HIDDEN.get(profile.name, min(profile.hidden))
            params += [pytest.param((op, a, b, Case(op, tokens=t, hidden=hidden, device=dev)),
                                    id=f"{op}-T{t}-H{hidden}-{a}-vs-{b}") for t in profile.tokens]
    if not params:
        raise pytest.UsageError(f"--ab {pair}: no mHC op has both implementations registered")
    metafunc.parametrize("ab_case", params)


def test_b_matches_a_and_reference(ab_case, record):
    op, a, b, case = ab_case
    spec = get_spec(op)
    inputs = spec.make_inputs(case)
    ref = spec.reference(inputs)
    ev_a = evaluate(spec, records(op)[a], case, inputs=inputs, ref=ref, check=f"ab[{a}]")
    ev_b = evaluate(spec, records(op)[b], case, inputs=inputs, ref=ref, check=f"ab[{b}]")
    record(ev_a.rows + ev_b.rows)
    assert ev_b.passed, f"{b} fails the reference on {case.id}: {ev_b.failures()}"
    drift = outputs_agree(spec, ev_a.outputs, ev_b.outputs, bitwise=False) if ev_a.outputs else []
    assert not drift, f"{b} differs from {a} on {case.id}: {'; '.join(drift)}"
