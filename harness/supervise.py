"""``harness run``'s pytest, in a child process, so that no way the kernels under test can end
it leaves the run without a verdict:

- a child killed by a signal (a segfault, an abort, the kernel's OOM killer) or ending without a
  report leaves run.json's ``crashed`` with the test it was running (the in-flight record of
  :mod:`harness.pytest_plugin.in_flight`) and ``crash.md``: verdict 1, not the 134/139 that
  ``git bisect run`` aborts on;
- SIGTERM and SIGINT are passed on to the child, which writes what it judged (verdict 125); a
  child that does not stop within ``STOP_GRACE_S`` is killed and the report written here;
- a test still in flight ``HANG_GRACE_S`` past its time limit (a hang the time limit's signal
  cannot interrupt, e.g. a spinning GPU kernel) gets its process aborted (SIGABRT, so the fault
  handler writes its stack): under pytest-xdist that worker's test fails, else the run ends
  as crashed, naming the test.
"""

from __future__ import annotations

import os
import pathlib
import signal
import subprocess
import sys
import threading
import time

from harness.reports.crash import SUPERVISED, how_it_ended, in_flight, write_crash_report
from harness.reports.meta import read_meta, update_meta, write_meta
from harness.subprocess_env import child_env

STOP_GRACE_S = 120.0
"""How long a stopped child may take to write its report (the summary's plots take seconds)."""
HANG_GRACE_S = 60.0
POLL_S = 1.0
PYTEST_USAGE_CODES = (2, 3, 4, 5)


class _Child:
    def __init__(self, args: list[str]) -> None:
        self.proc = subprocess.Popen([sys.executable, "-m", "pytest", *args],
                                     env=child_env(**{SUPERVISED: "1"}))
        self.stopped_by: str | None = None
        self.stopped_at = 0.0
        self.killed_hung: list[dict] = []
        self.previous = {}
        if threading.current_thread() is threading.main_thread():
            self.previous = {s: signal.signal(s, self._forward) for s in (signal.SIGTERM,
                                                                           signal.SIGINT)}

    def _forward(self, signum, frame) -> None:
        if self.stopped_by is None:
            self.stopped_by, self.stopped_at = signal.Signals(signum).name, time.monotonic()
        if self.proc.poll() is None:
            self.proc.send_signal(signum)

    def wait(self, folder: pathlib.Path) -> int:
        try:
            while True:
                try:
                    return self.proc.wait(timeout=POLL_S)
                except subprocess.TimeoutExpired:
                    pass
                if self.stopped_by and time.monotonic() - self.stopped_at > STOP_GRACE_S:
                    self.proc.kill()
                else:
                    self._abort_hung(folder)
        finally:
            for signum, handler in self.previous.items():
                signal.signal(signum, handler)

    def _abort_hung(self, folder: pathlib.Path) -> None:
        now = time.time()
        for record in in_flight(folder):
            limit = record.get("limit_s")
            if limit and now - float(record.get("started", now)) > limit + HANG_GRACE_S \
                    and record not in self.killed_hung:
                self.killed_hung.append(record)
                try:
                    os.kill(int(record["pid"]), signal.SIGABRT)
                except (OSError, KeyError, ValueError):
                    pass


def run_pytest(args: list[str], folder: pathlib.Path, profile: str) -> int:
    """pytest's exit code for ``args`` run in a child; a child that died leaves its crash in
    ``folder``'s run.json (then the code is 1), one that was stopped its stop."""
    child = _Child(args)
    code = child.wait(folder)
    meta = read_meta(folder)
    finished = "pytest_exit" in meta and not in_flight(folder)
    if finished:
        return code
    tests = [r["test"] for r in in_flight(folder)]
    hung = {r["test"] for r in child.killed_hung}
    how = how_it_ended(code)
    if hung & set(tests):
        how += (f" by harness run: still running {HANG_GRACE_S:g} s past its time limit, a hang "
                "the limit's signal could not interrupt")
    facts: dict = {"verdict": None}
    if child.stopped_by and not hung:
        facts["interrupted"] = {"how": f"{child.stopped_by}; the test process {how}",
                                "tests": tests}
        code = 2
    elif tests:
        facts["crashed"] = {"how": how, "tests": tests}
        write_crash_report(folder, how, tests)
        code = 1
    else:  # ended between tests without its report: the harness's trouble, not a kernel's
        code = code if code in PYTEST_USAGE_CODES else 3
    if meta:
        update_meta(folder, **facts)
    else:
        write_meta(folder, profile=profile, pytest_exit=code, argv=_shown_argv(args),
                   cwd=os.getcwd(), **facts)
    return code


def _shown_argv(args: list[str]) -> list[str]:
    """run.json's ``argv``: the selection file spelt out as the options it holds, as the
    plugin writes it (the command that reproduces the run); as given where it cannot be read."""
    from harness.options.selection import SelectionError, spelt_out

    try:
        return spelt_out(args)
    except SelectionError:
        return list(args)
