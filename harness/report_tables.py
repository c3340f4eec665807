"""The tables a person reads first in a run's summary: the implementation x op matrix, the
self-check of the seeded faults, and each failure with the command that reproduces only it.

Cells read ``pass 0.31`` / ``FAIL 4.2``: the verdict, then the largest share of its tolerance
that any comparison in the cell used (1.0 = at the limit; bit-exact comparisons show ``exact``
or the number of differing elements).
"""

from __future__ import annotations

import shlex

import pandas as pd

from harness.results import KNOWN_DEVIATION

SEEDED_FAULT_PREFIX = "fault-"
"""Implementation names of the harness's own seeded faults (harness/faults): they are meant to
fail, so they are counted in the self-check, never among failures."""


def seeded(df: pd.DataFrame) -> pd.Series:
    return df["impl"].astype(str).str.startswith(SEEDED_FAULT_PREFIX)


def _share(rows: pd.DataFrame) -> str:
    if "tol_used" in rows and rows["tol_used"].notna().any():
        return f"{rows['tol_used'].max():.2g}"
    if "mismatch_frac" in rows and rows["mismatch_frac"].notna().any():
        return "exact" if rows["mismatch_frac"].max() == 0 else "mismatch"
    return ""


def _cell(rows: pd.DataFrame) -> str:
    verdicts = set(rows["verdict"])
    if "fail" in verdicts:
        bad = rows[rows["verdict"] == "fail"]
        return f"**FAIL** {_share(bad)} ({len(bad)} of {len(rows)})".replace("  ", " ")
    if KNOWN_DEVIATION in verdicts:
        return f"known deviation ({int((rows['verdict'] == KNOWN_DEVIATION).sum())})"
    return f"pass {_share(rows)}".strip()


def matrix(df: pd.DataFrame, not_run: dict[tuple[str, str], str]) -> list[str]:
    """Markdown: one row per implementation, one column per op."""
    real = df[~seeded(df)] if not df.empty else df
    impls = sorted(set(real["impl"].astype(str)) | {name for _, name in not_run})
    ops = sorted(set(real["op"].astype(str)) | {op for op, _ in not_run})
    if not impls or not ops:
        return []
    lines = ["| implementation | " + " | ".join(ops) + " |",
             "| --- |" + " --- |" * len(ops)]
    for impl in impls:
        cells = []
        for op in ops:
            rows = real[(real["impl"] == impl) & (real["op"] == op)]
            if not rows.empty:
                cells.append(_cell(rows))
            elif (op, impl) in not_run:
                cells.append("not run")
            else:
                cells.append("")
        lines.append(f"| {impl} | " + " | ".join(cells) + " |")
    return ["## Implementation x op", "", *lines, "",
            "Cells: verdict, then the largest share of the tolerance used (1.0 = at the limit); "
            "\"not run\" cells are explained under \"Not run here\".", ""]


def self_check(df: pd.DataFrame) -> list[str]:
    """One line: how many of the seeded faults that ran were caught."""
    if df.empty:
        return []
    faults = df[seeded(df)]
    if faults.empty:
        return []
    caught = faults.groupby("impl")["verdict"].apply(lambda v: bool((v != "pass").any()))
    missed = sorted(caught[~caught].index)
    line = f"**Self-check:** {int(caught.sum())} of {len(caught)} seeded faults caught"
    return [line + (f"; MISSED: {', '.join(missed)}" if missed else "") + ".", ""]


def repro_command(row: pd.Series, profile: str, impl_modules: list[str]) -> str:
    test = row.get("test")
    if not isinstance(test, str) or not test:
        return ""
    parts = ["python3", "-m", "pytest", shlex.quote(test), "--profile", profile]
    impl = str(row.get("impl", ""))
    if impl and not impl.startswith(SEEDED_FAULT_PREFIX):
        parts += ["--impl", shlex.quote(impl)]
    for module in impl_modules:
        parts += ["--impl-module", shlex.quote(module)]
    return " ".join(parts)


def failures(df: pd.DataFrame, profile: str, impl_modules: list[str], limit: int = 30) -> list[str]:
    """The failed comparisons of real implementations, worst share of tolerance first."""
    if df.empty:
        return []
    bad = df[(df["verdict"] == "fail") & ~seeded(df)]
    if bad.empty:
        return []
    key = bad["tol_used"] if "tol_used" in bad else pd.Series(0, index=bad.index)
    bad = bad.assign(_key=pd.to_numeric(key, errors="coerce").fillna(float("inf")))
    bad = bad.sort_values("_key", ascending=False)
    lines = [f"## Failures ({len(bad)}; worst first)", ""]
    for _, row in bad.head(limit).iterrows():
        lines.append(f"- **{row['op']} / {row['impl']}**, case `{row['case']}`, check "
                     f"{row['check']}, output `{row.get('output', '?')}`: {row.get('detail', '')}")
        command = repro_command(row, profile, impl_modules)
        if command:
            lines.append(f"  - reproduce: `{command}`")
    if len(bad) > limit:
        lines.append(f"- ... {len(bad) - limit} more in results*.csv")
    return lines + [""]
