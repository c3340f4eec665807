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


SLOWEST = 8


def where_time_went(folder: pathlib.Path) -> list[str]:
    """Summary lines from ``durations.csv``: test seconds in all, the share of heavy tests (run
    with the GPU to themselves) and of waiting for the GPU (before a test's setup, so not part
    of its phases), and the slowest tests."""
    import pandas as pd

    path = folder / "durations.csv"
    if not path.exists():
        return []
    df = pd.read_csv(path)
    if df.empty:
        return []
    phases = df[["setup_s", "call_s", "teardown_s"]].fillna(0).sum(axis=1)
    waited = df["gpu_lock_wait_s"].fillna(0)
    heavy = df["heavy"].astype(str).str.lower() == "true"
    gpu = (f" {heavy.sum()} heavy tests (the GPU to themselves) took "
           f"{phases[heavy].sum():.0f} s; tests waited {waited.sum():.0f} s for the "
           "GPU." if heavy.any() or waited.sum() > 0 else "")
    lines = ["## Where the time went", "",
             f"{len(df)} tests, {phases.sum():.0f} test-seconds in all (workers add up).{gpu} "
             "Per test: `durations.csv`.", ""]
    for i in phases.sort_values(ascending=False).index[:SLOWEST]:
        extra = f", waited {waited[i]:.1f} s" if waited[i] >= 0.05 else ""
        lines.append(f"- {phases[i]:.1f} s{extra}: `{df.at[i, 'nodeid']}`")
    return lines + [""]
