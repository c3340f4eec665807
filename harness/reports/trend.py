"""Run-to-run comparison: metrics that got worse beyond noise, even inside tolerance.

Rows are matched on (op, impl, case, check, output). A metric regressed when the new value
exceeds ``FACTOR`` times the old one *and* the old one plus the metric's ``NOISE_FLOOR`` (an
absolute error of 1e-9 growing to 2e-9 is a reduction order, not a regression). Only runs of
the same environment (``ENVIRONMENT_KEYS``: device, driver, torch, Triton, CPU) are compared:
another cuBLAS or CPU rounds the reference and the kernels differently, which is no
regression of the code under test.

A comparison fails closed: a row of the old run missing from the new one (a case no longer
judged, as when a kernel starts declaring it unsupported) counts as worse, as do rows newly
failing and new rows that fail; two runs with no row in common cannot be compared at all.
"""

from __future__ import annotations

import pathlib

import pandas as pd

from harness.reports.summary import load_results

KEY = ["op", "impl", "case", "check", "output"]
METRICS = ["max_abs", "mean_abs", "max_rel", "p50", "p99", "mismatch_frac"]
FACTOR = 1.5
NOISE_FLOOR = {"max_abs": 1e-6, "mean_abs": 1e-7, "max_rel": 1e-6, "p50": 1e-6, "p99": 1e-6,
               "mismatch_frac": 0.0}
"""Absolute change below which a metric has not moved: fp32 rounding of O(1) values is ~1e-7,
and every precision loss this harness exists for (an fp16/bf16 intermediate, a dropped term)
moves errors by 1e-4 or more."""
ENVIRONMENT_KEYS = ("device", "gpu", "cuda", "driver", "torch", "triton", "triton_interpret",
                    "cpu")


class TrendError(ValueError):
    """Two runs that cannot be compared."""


def environment_differences(old: dict, new: dict) -> list[str]:
    """Where two runs' environments (run.json) differ in what moves rounding."""
    a, b = old.get("environment") or {}, new.get("environment") or {}
    return [f"{k} {a.get(k, '?')!r} -> {b.get(k, '?')!r}" for k in ENVIRONMENT_KEYS
            if str(a.get(k, "")) != str(b.get(k, ""))]


def _moved(new: pd.Series, old: pd.Series, metric) -> pd.Series:
    """Where ``new`` is worse than ``old`` beyond noise; ``metric`` a name or a Series of them."""
    floor = (metric.map(NOISE_FLOOR).fillna(0.0) if isinstance(metric, pd.Series)
             else NOISE_FLOOR.get(metric, 0.0))
    return (new > FACTOR * old) & (new > old + floor)


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
        part["regressed"] = _moved(part["new"], part["old"], m)
        rows.append(part)
    out = pd.concat(rows, ignore_index=True) if rows else pd.DataFrame()
    if not out.empty:
        out["verdict_change"] = out["verdict_old"] != out["verdict_new"]
    return out


def unmatched_rows(old: pd.DataFrame, new: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(rows of the old run with no row of the same key in the new one: cases, checks or outputs
    no longer judged; rows of the new run absent from the old one), one row per key."""
    a, b = old[KEY + ["verdict"]].drop_duplicates(KEY), new[KEY + ["verdict"]].drop_duplicates(KEY)
    both = a.merge(b[KEY], on=KEY, how="outer", indicator=True)
    vanished = both[both["_merge"] == "left_only"][KEY + ["verdict"]]
    appeared = b.merge(a[KEY], on=KEY, how="left", indicator=True)
    return vanished, appeared[appeared["_merge"] == "left_only"][KEY + ["verdict"]]


def newly_failing(old: pd.DataFrame, new: pd.DataFrame) -> pd.DataFrame:
    """Keys that passed in the old run and do not in the new one (whatever their metrics)."""
    a, b = old[KEY + ["verdict"]].drop_duplicates(KEY), new[KEY + ["verdict"]]
    worst = b.assign(bad=b["verdict"] != "pass").groupby(KEY, as_index=False)["bad"].any()
    both = a.merge(worst, on=KEY)
    return both[(both["verdict"] == "pass") & both["bad"]][KEY]


def trend_matrix(diff: pd.DataFrame) -> list[str]:
    """Markdown: implementation x op, each cell the change from the old run to the new one:
    ``▲ 2.3x`` (worse beyond noise; the worst ratio), ``▲ FAIL`` (newly failing), ``▼ 0.5x``
    (better by as much), ``=`` (within noise)."""
    if diff.empty:
        return []
    impls, ops = sorted(diff["impl"].astype(str).unique()), sorted(diff["op"].astype(str).unique())
    lines = ["| implementation | " + " | ".join(ops) + " |", "| --- |" + " --- |" * len(ops)]
    for impl in impls:
        cells = []
        for op in ops:
            rows = diff[(diff["impl"] == impl) & (diff["op"] == op)]
            newly = rows["verdict_change"] & (rows["verdict_new"] != "pass")
            worse = rows[rows["regressed"]]
            better = rows[_moved(rows["old"], rows["new"], rows["metric"])]
            cells.append("" if rows.empty else "▲ FAIL" if newly.any()
                         else f"▲ {worse['ratio'].max():.2g}x" if not worse.empty
                         else f"▼ {better['ratio'].min():.2g}x" if not better.empty else "=")
        lines.append(f"| {impl} | " + " | ".join(cells) + " |")
    return lines + ["", "▲ worse than the old run by more than "
                    f"{FACTOR}x (worst ratio) or newly failing; ▼ better by as much; = within noise.", ""]


def first_moved(bad: pd.DataFrame, runs: list[pathlib.Path]) -> pd.Series:
    """For each worse row: the first of ``runs`` (oldest first, ending with the new run) whose
    value is already beyond ``FACTOR`` x the old value."""
    if bad.empty or not runs:
        return pd.Series(dtype=str)
    first = pd.Series(runs[-1].name, index=bad.index)
    found = pd.Series(False, index=bad.index)
    for run in runs:
        df = load_results(run)
        if df.empty:
            continue
        for metric, rows in bad.groupby("metric"):
            if metric not in df:
                continue
            values = rows[KEY].merge(df[KEY + [metric]].drop_duplicates(KEY), on=KEY, how="left")
            values.index = rows.index
            moved = _moved(values[metric], rows["old"], metric)
            hit = moved & ~found
            first[hit[hit].index] = run.name
            found |= moved
    return first


def write_trend(old_dir: pathlib.Path, new_dir: pathlib.Path,
                between: list[pathlib.Path] | None = None) -> tuple[pathlib.Path, int]:
    """``trend.md`` in ``new_dir``; returns it and the number of rows that got worse: metrics
    regressed, rows newly failing, rows of the old run that vanished from the new one, and new
    rows that fail. Raises TrendError when no row of the old run is in the new one. ``between``: runs after ``old_dir`` and before ``new_dir`` (oldest first), searched
    for the first run in which each worse metric moved."""
    from harness.reports.summary import read_meta

    changed = environment_differences(read_meta(old_dir), read_meta(new_dir))
    if changed:
        raise TrendError(f"{old_dir} and {new_dir} ran in different environments ("
                         + "; ".join(changed) + "): their errors differ by rounding, not by "
                         "the code; compare runs of one machine and software stack")
    old, new = load_results(old_dir), load_results(new_dir)
    if old.empty or new.empty:
        raise FileNotFoundError(f"no results*.csv in {old_dir if old.empty else new_dir}; "
                                "point at a folder written by `harness run`")
    vanished, appeared = unmatched_rows(old, new)
    if len(vanished) == len(old[KEY].drop_duplicates()):
        raise TrendError(f"no result row of {old_dir} is in {new_dir} (matched on "
                         f"{', '.join(KEY)}): the runs judged different ops, implementations or "
                         "cases; compare runs of the same selection")
    diff = compare_runs(old, new)
    bad = diff[diff["regressed"] | (diff["verdict_change"] & (diff["verdict_new"] != "pass"))] \
        if not diff.empty else diff
    failing = newly_failing(old, new)
    failing = failing[~failing.set_index(KEY).index.isin(bad.set_index(KEY).index)] \
        if not bad.empty else failing
    failing_new = appeared[appeared["verdict"] == "fail"]
    worse = len(bad) + len(failing) + len(vanished) + len(failing_new)
    lines = [f"## Trend against `{old_dir}`", "",
             f"{len(diff)} metric values matched; {len(bad)} worse by more than {FACTOR}x "
             f"(or newly failing); {len(failing)} other row(s) newly failing; {len(vanished)} "
             f"row(s) of the old run vanished (no longer judged); {len(appeared)} new row(s), "
             f"{len(failing_new)} of them failing.", ""] + trend_matrix(diff)
    for title, rows in (("Vanished: judged in the old run, not in this one", vanished),
                        ("Newly failing without a metric that moved", failing),
                        ("New rows that fail", failing_new)):
        if len(rows):
            lines += [f"{title} ({len(rows)}; first 30):", "", "```",
                      rows.head(30).to_string(index=False), "```", ""]
    if not bad.empty:
        worst = bad.assign(first_moved_in=first_moved(bad, list(between or []) + [new_dir]))
        worst = worst.sort_values("ratio", ascending=False).head(30)
        lines += ["```", worst[KEY + ["metric", "old", "new", "ratio", "verdict_new",
                                      "first_moved_in"]].to_string(index=False), "```"]
    path = new_dir / "trend.md"
    path.write_text("\n".join(lines) + "\n")
    return path, worse


def runs_between(old_dir: pathlib.Path, new_dir: pathlib.Path) -> list[pathlib.Path]:
    """Run folders beside ``new_dir`` with its profile, started after ``old_dir`` and before
    ``new_dir`` (oldest first)."""
    from harness.reports.summary import read_meta

    profile, lo = read_meta(new_dir).get("profile"), read_meta(old_dir).get("started", "")
    hi = read_meta(new_dir).get("started", "")
    found = []
    for p in new_dir.parent.iterdir():
        meta = read_meta(p) if p.is_dir() and not p.is_symlink() else {}
        if p not in (old_dir, new_dir) and meta.get("profile") == profile \
                and lo < meta.get("started", "") < hi:
            found.append((meta["started"], p))
    return [p for _, p in sorted(found)]


def previous_run(folder: pathlib.Path, profile: str) -> pathlib.Path | None:
    """The newest other run folder beside ``folder`` with the same profile and environment."""
    from harness.reports.summary import read_meta

    here = read_meta(folder)
    candidates = sorted((p for p in folder.parent.iterdir()
                         if p.is_dir() and not p.is_symlink() and p != folder
                         and read_meta(p).get("profile") == profile
                         and not environment_differences(read_meta(p), here)), reverse=True)
    return candidates[0] if candidates else None
