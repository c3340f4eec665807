"""A per-case time limit, so a hung kernel fails its test (named, with every thread's stack) and
the run goes on: pytest-timeout enforces it, with the limit of the profile
(``Profile.case_time_limit_s``) and ``E2E_TIME_LIMIT_S`` for the end-to-end tests, unless the
user set one (``--timeout``, a ``timeout`` marker or ini value, ``PYTEST_TIMEOUT``). A hang that
never returns to Python (a spinning GPU kernel) escapes the signal; ``harness run`` kills such a
process once the in-flight record (:mod:`harness.pytest_plugin.in_flight`) says its test has
run well past its limit."""

from __future__ import annotations

import os
import re

import pytest

from harness.pytest_plugin.context import run_profile

E2E_TIME_LIMIT_S = 1800.0
"""The end-to-end tests serve a model and run a benchmark: up to 430 s each on a 2-core CPU."""
TIME_LIMIT = pytest.StashKey[float]()


def _user_set(config) -> bool:
    return (config.getoption("timeout", None) is not None or bool(config.getini("timeout"))
            or bool(os.environ.get("PYTEST_TIMEOUT")))


def case_time_limit(config) -> float | None:
    """The limit this run gives a test without a ``timeout`` marker (None: no pytest-timeout)."""
    if not config.pluginmanager.hasplugin("timeout"):
        return None
    if TIME_LIMIT not in config.stash:
        if _user_set(config):
            config.stash[TIME_LIMIT] = float(config._env_timeout or 0) or None
        else:
            

            config.stash[TIME_LIMIT] = run_profile(config).case_time_limit_s
    return config.stash[TIME_LIMIT]


def item_time_limit(item) -> float | None:
    marker = item.get_closest_marker("timeout")
    if marker is not None and marker.args:
        return float(marker.args[0]) or None
    return case_time_limit(item.config)


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config, items):
    limit = case_time_limit(config)
    if limit is None or _user_set(config):
        return
    for item in items:
        if item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(
                E2E_TIME_LIMIT_S if "e2e" in item.keywords else limit))


def pytest_report_header(config):
    limit = case_time_limit(config)
    return [f"harness: per-case time limit {limit:g} s (end-to-end tests {E2E_TIME_LIMIT_S:g} s)"
            if limit else "harness: no per-case time limit (pytest-timeout is not installed)"]


def is_time_limit(error: BaseException) -> bool:
    """Whether ``error`` is pytest-timeout's failure of a test that ran past its limit."""
    if not isinstance(error, pytest.fail.Exception):
        return False
    try:
        from pytest_timeout import PYTEST_FAILURE_MESSAGE
    except ImportError:
        return False
    pattern = re.escape(PYTEST_FAILURE_MESSAGE).replace(re.escape("%s"), ".+")
    return re.fullmatch(pattern, str(error.msg)) is not None
