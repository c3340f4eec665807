"""A progress line on pytest's terminal every half minute: tests finished of those collected,
time elapsed and an estimate of the time left. The estimate weighs each test by what it took in
the newest earlier run of the same profile beside the report folder (its ``durations.csv``), so
minutes-long end-to-end tests are not counted like millisecond ones; a fresh clone, which has no
earlier run, uses the shipped ``expected_seconds/<profile>.csv`` (the main job on a 2-core CPU);
only the shares matter, so another machine's speed cancels out. Without either, by count."""

from __future__ import annotations

import pathlib
import time

import pytest

from harness.pytest_plugin.context import report_dir, xdist_worker

INTERVAL_S = 30.0
SHIPPED = pathlib.Path(__file__).with_name("expected_seconds")


def _expected_seconds(folder: pathlib.Path | None, profile: str) -> dict[str, float]:
    """nodeid -> seconds it took in the newest earlier run of ``profile`` beside ``folder``, else
    in the shipped baseline of ``profile``."""
    import pandas as pd

    from harness.reports.summary import read_meta

    earlier = []
    if folder is not None and folder.parent.is_dir():
        earlier = sorted((p for p in folder.parent.iterdir() if p.is_dir() and p != folder
                          and (p / "durations.csv").exists()
                          and read_meta(p).get("profile") == profile), reverse=True)
    try:
        if earlier:
            df = pd.read_csv(earlier[0] / "durations.csv")
            return dict(zip(df["nodeid"], df[["setup_s", "call_s", "teardown_s"]].fillna(0)
                            .sum(axis=1)))
        shipped = SHIPPED / f"{profile}.csv"
        if shipped.exists():
            df = pd.read_csv(shipped)
            return dict(zip(df["nodeid"], df["seconds"]))
    except (OSError, ValueError, KeyError):
        pass
    return {}


def _clock(seconds: float) -> str:
    minutes, sec = divmod(int(seconds), 60)
    return f"{minutes}m{sec:02d}s" if minutes else f"{sec}s"


class Progress:
    def __init__(self, reporter, expected: dict[str, float]) -> None:
        self._reporter, self._expected = reporter, expected
        self._ids: list[str] = []
        self._done: set[str] = set()
        self._started = self._last = time.monotonic()

    def pytest_collection_finish(self, session) -> None:
        self._ids = [item.nodeid for item in session.items]

    @pytest.hookimpl(optionalhook=True)  # a hook of pytest-xdist, which may be switched off
    def pytest_xdist_node_collection_finished(self, node, ids) -> None:
        self._ids = self._ids or list(ids)

    def pytest_runtest_logreport(self, report) -> None:
        if report.when == "teardown":
            self._done.add(report.nodeid)
        now = time.monotonic()
        if now - self._last >= INTERVAL_S and self._ids:
            self._last = now
            self._reporter.write_line(self.line(now - self._started))

    def line(self, elapsed: float) -> str:
        total, done = len(self._ids), len(self._done)
        left = self._left(elapsed, done, total)
        return (f"progress: {done}/{total} tests ({done / total:.0%}), {_clock(elapsed)} "
                f"elapsed" + (f", about {_clock(left)} left" if left is not None else ""))

    def _left(self, elapsed: float, done: int, total: int) -> float | None:
        if not done:
            return None
        known = [self._expected[i] for i in self._ids if i in self._expected]
        if len(known) < total / 2:
            return elapsed / done * (total - done)
        typical = sum(known) / len(known)
        cost = {i: self._expected.get(i, typical) for i in self._ids}
        finished = sum(cost[i] for i in self._done if i in cost)
        if finished <= 0:
            return elapsed / done * (total - done)
        return (sum(cost.values()) - finished) * elapsed / finished


@pytest.hookimpl(trylast=True)
def pytest_configure(config) -> None:
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if reporter is None or xdist_worker(config) is not None or config.option.collectonly:
        return
    from harness.profiles import get_profile

    expected = _expected_seconds(report_dir(config), get_profile(config.getoption("profile")).name)
    config.pluginmanager.register(Progress(reporter, expected), "harness-progress")
