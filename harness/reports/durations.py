"""The summary's "Where the time went" section, read from the ``durations.csv`` that
:mod:`harness.pytest_plugin.durations` writes as tests finish."""

from __future__ import annotations

import pathlib

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
