"""The detectors fire: each seeded fault is flagged by its detector, and the shipped
implementations pass the same detector (so a green suite means something).

The second half is the self-test's false-alarm check (marked machinery): in the main job the
suites named after each detector already judge the shipped implementations with it."""

import pytest

from harness.core.device import default_device
from harness.families import all_faults
from harness.profiles import get_profile
from harness.core.registry import records
from harness.selftest import (control_implementations, controls, not_run_here, onsets,
                              run_detector)

FAULTS = all_faults()
CONTROLS = [(op, det, name) for op, det in controls()
            for name, _ in control_implementations(op, det)]


def _skip_if_not_here(detector: str) -> None:
    why = not_run_here(detector, default_device())
    if why:
        pytest.skip(why)


@pytest.fixture
def profile(request):
    return get_profile(request.config.getoption("profile"))


@pytest.fixture
def hidden(profile):
    return min(profile.hidden)


@pytest.mark.parametrize("fault", FAULTS, ids=[f.name for f in FAULTS])
def test_fault_is_flagged(fault, profile, hidden, record):
    _skip_if_not_here(fault.detector)
    for onset in onsets(fault, profile):
        finding = run_detector(fault.detector, fault.build(onset), profile, default_device(),
                               hidden)
        record(finding.rows)
        assert not finding.passed, (f"seeded fault {fault.name} ({fault.bug_class}) breaking "
                                    f"above T={onset} was MISSED by {fault.detector}: "
                                    f"{finding.message}")


@pytest.mark.machinery
@pytest.mark.parametrize("op,detector,name", CONTROLS, ids=["-".join(c) for c in CONTROLS])
def test_shipped_kernel_passes(op, detector, name, profile, hidden, record):
    _skip_if_not_here(detector)
    impl = records(op)[name]
    finding = run_detector(detector, impl, profile, default_device(), hidden)
    record(finding.rows)
    assert finding.passed, finding.explain()
