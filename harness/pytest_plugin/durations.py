"""``durations.csv`` in the report folder, one row per test as it finishes (not at the end), so a
sweep that is stopped or runs out of time still says where its time went: each phase's seconds,
whether it needed the GPU to itself, how long it waited for the GPU, its peak GPU memory, the
xdist worker that ran it, and the first line of a failure."""

from __future__ import annotations

import csv
import pathlib
import time

COLUMNS = ("finished_s", "nodeid", "outcome", "setup_s", "call_s", "teardown_s",
           "heavy", "gpu_lock_wait_s", "gpu_peak_gib", "gpu_retained_gib", "worker",
           "message")


class DurationLog:
    def __init__(self, folder: pathlib.Path) -> None:
        self._path = folder / "durations.csv"
        self._started = time.monotonic()
        self._phases: dict[str, dict] = {}
        with open(self._path, "w", newline="") as f:
            csv.writer(f).writerow(COLUMNS)

    def pytest_runtest_logreport(self, report) -> None:
        row = self._phases.setdefault(report.nodeid, {"outcome": "passed"})
        row[f"{report.when}_s"] = round(report.duration, 3)
        if report.failed or (report.skipped and row["outcome"] == "passed"):
            row["outcome"] = report.outcome
        if report.failed and "message" not in row:
            crash = getattr(report.longrepr, "reprcrash", None)
            row["message"] = (getattr(crash, "message", None) or str(report.longrepr))[:400]
        row.update((k, v) for k, v in report.user_properties if k in COLUMNS)
        gateway = getattr(getattr(report, "node", None), "gateway", None)
        row["worker"] = getattr(gateway, "id", "")
        if report.when != "teardown":
            return
        row = self._phases.pop(report.nodeid)
        row.update(finished_s=round(time.monotonic() - self._started, 1), nodeid=report.nodeid)
        with open(self._path, "a", newline="") as f:
            csv.writer(f).writerow([row.get(c, "") for c in COLUMNS])
