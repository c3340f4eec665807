"""A progress line on pytest's terminal every half minute: tests finished of those collected,
time elapsed and an estimate of the time left. The estimate weighs each test by what it took in
the newest earlier run of the same profile beside the report folder (its ``durations.csv``), so
minutes-long end-to-end tests are not counted like millisecond ones; a fresh clone, which has no
earlier run, uses the shipped ``expected_seconds/<profile>.csv`` (the main job on a 2-core CPU, and
the test command's other tests from its CI run);
only the shares matter, so another machine's speed cancels out. Without either, by count."""

from __future__ import annotations

import pathlib
import time

import pytest

from harness.pytest_plugin.context import report_dir, run_profile, xdist_worker

INTERVAL_S = 30.0
MIN_SHARE = 0.02
"""No estimate until this share of the expected work is done. The rate is taken from the first
test's start (not the workers' start-up), and a test still running is credited the time it has
run, up to what it is expected to take: a fresh clone's first lines said 58 minutes left for a
9-minute run, charging the minutes-long E2E test as not begun while it ran."""
SHIPPED = pathlib.Path(__file__).with_name("expected_seconds")


def _expected_seconds(folder: pathlib.Path | None, profile: str) -> dict[str, float]:
    """nodeid -> seconds it took in the newest earlier run of ``profile`` beside ``folder``, else
    in the shipped baseline of ``profile``."""
    import pandas as pd

    from harness.reports.meta import read_meta

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
        self._first: float | None = None
        self._running: dict[str, float] = {}

    def pytest_collection_finish(self, session) -> None:
        self._ids = [item.nodeid for item in session.items]

    @pytest.hookimpl(optionalhook=True)  # a hook of pytest-xdist, which may be switched off
    def pytest_xdist_node_collection_finished(self, node, ids) -> None:
        self._ids = self._ids or list(ids)

    def pytest_runtest_logstart(self, nodeid, location) -> None:
        now = time.monotonic()
        self._first = self._first or now
        self._running.setdefault(nodeid, now)

    def pytest_runtest_logreport(self, report) -> None:
        now = time.monotonic()
        if report.when == "teardown":
            self._done.add(report.nodeid)
            self._running.pop(report.nodeid, None)
        if now - self._last >= INTERVAL_S and self._ids:
            self._last = now
            running = {i: now - start for i, start in self._running.items()}
            self._reporter.write_line(self.line(now - self._started, now - (self._first or now),
                                                running))

    def line(self, elapsed: float, since_first: float | None = None,
             running: dict[str, float] | None = None) -> str:
        """``elapsed`` since the start; ``since_first`` since the first test started (the rate's
        clock; default ``elapsed``); ``running``: the tests in flight and how long they have run."""
        total, done = len(self._ids), len(self._done)
        left = self._left(elapsed if since_first is None else since_first, done, total,
                          running or {})
        return (f"progress: {done}/{total} tests ({done / total:.0%}), {_clock(elapsed)} "
                f"elapsed" + (f", about {_clock(left)} left" if left is not None else ""))

    def _left(self, elapsed: float, done: int, total: int,
              running: dict[str, float]) -> float | None:
        if not done:
            return None
        known = [self._expected[i] for i in self._ids if i in self._expected]
        if len(known) < total / 2:
            return elapsed / done * (total - done)
        typical = sum(known) / len(known)
        cost = {i: self._expected.get(i, typical) for i in self._ids}
        finished = sum(cost[i] for i in self._done if i in cost) + sum(
            min(ran, cost[i]) for i, ran in running.items() if i in cost)
        if finished < MIN_SHARE * sum(cost.values()) or elapsed <= 0:
            return None
        return (sum(cost.values()) - finished) * elapsed / finished


@pytest.hookimpl(trylast=True)
def pytest_configure(config) -> None:
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if reporter is None or xdist_worker(config) is not None or config.option.collectonly:
        return
    expected = _expected_seconds(report_dir(config), run_profile(config).name)
    config.pluginmanager.register(Progress(reporter, expected), "harness-progress")
