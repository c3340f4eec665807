"""Known deviations apply only to the tests that can observe them.

A sweep test becomes a strict xfail expecting :class:`KnownDeviationSeen` only when it evaluates
(``harness.evaluate.evaluate``) its target's implementation on a case one of its known deviations
covers: then a pass means the deviation is gone (XPASS(strict): remove the declaration), and any
other failure still fails. A test that never evaluates a covered case (an empty batch, leading
dims, batch invariance, precision growth) is judged as for any implementation: it cannot raise
``KnownDeviationSeen``, so a declaration made for it would only turn its pass into an XPASS.
"""

from __future__ import annotations

import pytest

from harness.core.registry import KnownDeviationSeen
from harness.evaluate import OBSERVERS
from harness.pytest_plugin.sweep import Target

OBSERVER_NAME = "known-deviations"
_RUNNING: list = []
"""The item whose call phase is running in this process (pytest runs one at a time a process)."""


def _target(item) -> Target | None:
    target = getattr(getattr(item, "callspec", None), "params", {}).get("target")
    return target if isinstance(target, Target) else None


def observe(*, impl, case, **_) -> None:
    """Evaluation observer: the running test evaluated ``impl`` on ``case``."""
    if not _RUNNING:
        return
    item = _RUNNING[-1]
    target = _target(item)
    if target is None or impl.name != target.impl.name:
        return
    reasons = [d.reason for d in impl.deviations_for(case)]
    if reasons and item.get_closest_marker("xfail") is None:
        item.add_marker(pytest.mark.xfail(
            strict=True, raises=KnownDeviationSeen,
            reason=f"known deviation of {impl.name} from the contract: {'; '.join(reasons)}"))


def pytest_configure(config):
    OBSERVERS.add(OBSERVER_NAME, observe, replace=True)


def pytest_unconfigure(config):
    OBSERVERS.remove(OBSERVER_NAME)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    _RUNNING.append(item)
    try:
        yield
    finally:
        _RUNNING.pop()
