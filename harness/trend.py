"""Run-to-run comparison: metrics that got worse beyond noise, even inside tolerance.

Rows are matched on (op, impl, case, check, output). A metric regressed when the new value
exceeds ``FACTOR`` times the old one *and* the old one plus ``NOISE`` (so exact-zero or
rounding-level metrics do not flag on the last bit). Kernels here are deterministic for a fixed
seed, so any real change in error shows up directly; cuBLAS-backed references move by < 1.5x.
"""

from __future__ import annotations

import pathlib

import pandas as pd

from harness.report import load_results

KEY = ["op", "impl", "case", "check", "output"]
METRICS = ["max_abs", "mean_abs", "max_rel", "p50", "p99", "mismatch_frac"]
FACTOR = 1.5
NOISE = 1e-9


def compare_runs(old: pd.DataFrame, new: pd.DataFrame) -> pd.DataFrame:
    """One row per (key, metric) present in both runs, with ``regressed`` and ``verdict_change``."""
    metrics = [m for m in METRICS if m in old and m in new]
    merged = old[KEY + ["verdict"] + metrics].merge(new[KEY + ["verdict"] + metrics], on=KEY,
                                                    suffixes=("_old", "_new"))
    rows = []
    for m in metrics:
        a, b = merged[f"{m}_old"], merged[f"{m}_new"]
        ok = a.notna() & b.notna()
        part = merged.loc[ok, KEY + ["verdict_old", "verdict_new"]].copy()
        part["metric"], part["old"], part["new"] = m, a[ok], b[ok]
        part["ratio"] = part["new"] / part["old"].where(part["old"] > 0)
        part["regressed"] = (part["new"] > FACTOR * part["old"]) & (part["new"] > part["old"] + NOISE)
        rows.append(part)
    out = pd.concat(rows, ignore_index=True) if rows else pd.DataFrame()
    if not out.empty:
        out["verdict_change"] = out["verdict_old"] != out["verdict_new"]
    return out


def write_trend(old_dir: pathlib.Path, new_dir: pathlib.Path) -> tuple[pathlib.Path, int]:
    """``trend.md`` in ``new_dir``; returns it and the number of regressed (or newly failing) rows."""
    old, new = load_results(old_dir), load_results(new_dir)
    if old.empty or new.empty:
        raise FileNotFoundError(f"no results*.csv in {old_dir if old.empty else new_dir}; "
                                "point at a folder written by `harness run`")
    diff = compare_runs(old, new)
    bad = diff[diff["regressed"] | (diff["verdict_change"] & (diff["verdict_new"] != "pass"))] \
        if not diff.empty else diff
    lines = [f"## Trend against `{old_dir}`", "",
             f"{len(diff)} metric values matched; {len(bad)} worse by more than {FACTOR}x "
             "(or newly failing).", ""]
    if not bad.empty:
        worst = bad.sort_values("ratio", ascending=False).head(30)
        lines += ["```", worst[KEY + ["metric", "old", "new", "ratio", "verdict_new"]]
                  .to_string(index=False), "```"]
    path = new_dir / "trend.md"
    path.write_text("\n".join(lines) + "\n")
    return path, len(bad)


def previous_run(folder: pathlib.Path, profile: str) -> pathlib.Path | None:
    """The newest other run folder beside ``folder`` with the same profile."""
    from harness.report import read_meta

    candidates = sorted((p for p in folder.parent.iterdir()
                         if p.is_dir() and not p.is_symlink() and p != folder
                         and read_meta(p).get("profile") == profile), reverse=True)
    return candidates[0] if candidates else None
