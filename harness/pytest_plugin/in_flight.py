"""What a run is doing when it stops short.

- Each process that runs tests keeps the test it is running in the report folder
  (``in_flight/<worker>.json``: node id, pid, time limit), so a process that dies (a segfault, an
  abort, a kill) still names the case that killed it: ``harness run`` reads it
  (:mod:`harness.supervise`), as does ``harness report`` on a folder with no run.json.
- Under ``harness run`` (``HARNESS_SUPERVISED``), Python's fault handler writes its tracebacks
  beside it (``in_flight/<worker>.traceback``) for the crash report.
- SIGTERM stops a run as Ctrl-C does: pytest finishes the session, so what was judged so far is
  written (results, run.json, summary) with the verdict "could not test" (125) naming the tests
  that were in flight.
"""

from __future__ import annotations

import faulthandler
import json
import os
import shutil
import signal
import threading
import time

import pytest

from harness.pytest_plugin.context import report_dir, xdist_worker
from harness.pytest_plugin.time_limit import item_time_limit
from harness.reports.crash import IN_FLIGHT, SUPERVISED

PYTEST_INTERRUPTED = 2
REPEAT_S = 2.0
"""A second stop signal this soon after the first is the same stop (Ctrl-C reaches both
``harness run`` and its pytest, and ``harness run`` forwards it too): ignored, so it cannot break
the writing of the report. Later ones stop the finishing as well."""


class Record:
    """This process's ``in_flight/<worker>.json``: the test it is running, or nothing."""

    def __init__(self, folder, worker: str | None) -> None:
        self.path = folder / IN_FLIGHT / f"{worker or 'main'}.json"
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.write_text("{}")

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_runtest_protocol(self, item, nextitem):
        self.path.write_text(json.dumps({"test": item.nodeid, "pid": os.getpid(),
                                         "started": time.time(),
                                         "limit_s": item_time_limit(item)}))
        try:
            return (yield)
        finally:
            self.path.write_text("{}")


class Running:
    """The tests started and not finished, as the controller sees them (pytest-xdist forwards
    the workers' log hooks), and the signal that stopped the run."""

    def __init__(self) -> None:
        self.tests: dict[str, float] = {}
        self.signal: str | None = None
        self._stopped_at = 0.0
        self._previous: dict[int, object] = {}

    def pytest_runtest_logstart(self, nodeid, location) -> None:
        self.tests[nodeid] = time.monotonic()

    def pytest_runtest_logfinish(self, nodeid, location) -> None:
        self.tests.pop(nodeid, None)

    def catch(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return
        for signum in (signal.SIGTERM, signal.SIGINT):
            self._previous[signum] = signal.signal(signum, self._stop)

    def release(self) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._previous.clear()

    def _stop(self, signum, frame) -> None:
        if self.signal is not None and time.monotonic() - self._stopped_at < REPEAT_S:
            return
        self.signal, self._stopped_at = signal.Signals(signum).name, time.monotonic()
        raise KeyboardInterrupt(f"stopped by {self.signal}")


RUNNING = pytest.StashKey[Running]()
TRACEBACK_FILE = pytest.StashKey[object]()


@pytest.hookimpl(trylast=True)
def pytest_configure(config) -> None:
    folder, worker = report_dir(config), xdist_worker(config)
    if folder is not None and not config.option.collectonly:
        config.pluginmanager.register(Record(folder, worker), "harness-in-flight")
        if os.environ.get(SUPERVISED):
            stream = open(folder / IN_FLIGHT / f"{worker or 'main'}.traceback", "w")
            config.stash[TRACEBACK_FILE] = stream
            faulthandler.enable(file=stream, all_threads=True)
    if worker is None:
        running = Running()
        running.catch()
        config.stash[RUNNING] = running
        config.pluginmanager.register(running, "harness-running")


def stopped(config, exitstatus: int) -> dict:
    """run.json's ``interrupted`` for a run stopped by a signal (or Ctrl-C): how, and the tests
    in flight."""
    running = config.stash.get(RUNNING, None)
    if running is None or int(exitstatus) != PYTEST_INTERRUPTED:
        return {}
    return {"interrupted": {"how": running.signal or "SIGINT (Ctrl-C) or pytest.exit",
                            "tests": sorted(running.tests, key=running.tests.get)}}


def pytest_unconfigure(config) -> None:
    running = config.stash.get(RUNNING, None)
    if running is not None:
        running.release()
    stream = config.stash.get(TRACEBACK_FILE, None)
    if stream is not None:
        faulthandler.disable()
        stream.close()
    folder = report_dir(config)
    if folder is not None and xdist_worker(config) is None:
        shutil.rmtree(folder / IN_FLIGHT, ignore_errors=True)
