"""The tables a person reads first in a run's summary: the implementation x op matrix, the
self-check of the seeded faults, and each failure with the command that reproduces only it.

Cells read ``pass 0.31`` / ``FAIL 4.2``: the verdict, then the largest share of its tolerance
that any comparison in the cell used (1.0 = at the limit; bit-exact comparisons show ``exact``
or the number of differing elements).
"""

from __future__ import annotations

import json
import shlex

import pandas as pd

from harness.core.results import KNOWN_DEVIATION
from harness.core.verdicts import SEEDED_FAULT_PREFIX, failure_kind


def seeded(df: pd.DataFrame) -> pd.Series:
    return df["impl"].astype(str).str.startswith(SEEDED_FAULT_PREFIX)


def _share(rows: pd.DataFrame) -> str:
    if "tol_used" in rows and rows["tol_used"].notna().any():
        return f"{rows['tol_used'].max():.2g}"
    if "mismatch_frac" in rows and rows["mismatch_frac"].notna().any():
        return "exact" if rows["mismatch_frac"].max() == 0 else "mismatch"
    return ""


def _cell(rows: pd.DataFrame) -> tuple[str, str]:
    """(state, text): state is pass, fail or known for the HTML colours."""
    verdicts = set(rows["verdict"])
    if "fail" in verdicts:
        bad = rows[rows["verdict"] == "fail"]
        return "fail", f"FAIL {_share(bad)} ({len(bad)} of {len(rows)})".replace("  ", " ")
    if KNOWN_DEVIATION in verdicts:
        return "known", f"known deviation ({int((rows['verdict'] == KNOWN_DEVIATION).sum())})"
    return "pass", f"pass {_share(rows)}".strip()


def matrix_cells(df: pd.DataFrame, not_run: dict[tuple[str, str], str],
                 notes: dict[tuple[str, str], str] | None = None
                 ) -> tuple[list[str], list[str], dict[str, dict[str, tuple[str, str]]]]:
    """(implementations, ops, cells[impl][op] = (state, text)); state is pass, fail, known,
    notrun (with the reason as text) or empty; ``notes[(impl, op)]`` (what the cell was judged
    on) follows the verdict after a semicolon."""
    notes = notes or {}
    real = df[~seeded(df)] if not df.empty else df
    impls = sorted(set(real["impl"].astype(str)) | {name for _, name in not_run}) if not df.empty \
        else sorted({name for _, name in not_run})
    ops = sorted(set(real["op"].astype(str)) | {op for op, _ in not_run}) if not df.empty \
        else sorted({op for op, _ in not_run})
    cells: dict[str, dict[str, tuple[str, str]]] = {}
    for impl in impls:
        for op in ops:
            rows = real[(real["impl"] == impl) & (real["op"] == op)] if not df.empty else real
            if not rows.empty:
                state, text = _cell(rows)
                note = notes.get((impl, op))
                cells.setdefault(impl, {})[op] = (state, f"{text}; {note}" if note else text)
            elif (op, impl) in not_run:
                cells.setdefault(impl, {})[op] = ("notrun", not_run[(op, impl)])
            else:
                cells.setdefault(impl, {})[op] = ("empty", "")
    return impls, ops, cells


def matrix(df: pd.DataFrame, not_run: dict[tuple[str, str], str],
           notes: dict[tuple[str, str], str] | None = None,
           labels: dict[str, str] | None = None) -> list[str]:
    """Markdown: one row per implementation (``labels`` may rename it), one column per op."""
    impls, ops, cells = matrix_cells(df, not_run, notes)
    labels = labels or {}
    if not impls or not ops:
        return []
    shown = {"fail": lambda t: t.replace("FAIL", "**FAIL**", 1), "notrun": lambda t: "not run"}
    lines = ["| implementation | " + " | ".join(ops) + " |",
             "| --- |" + " --- |" * len(ops)]
    for impl in impls:
        row = [shown.get(state, lambda t: t)(text) for state, text in (cells[impl][op] for op in ops)]
        lines.append(f"| {labels.get(impl, impl)} | " + " | ".join(row) + " |")
    return ["## Implementation x op", "", *lines, "",
            "Cells: verdict, then the largest share of the tolerance used (1.0 = at the limit), "
            "then the sweep cases judged of those collected (\"What was judged\"); \"not run\" "
            "cells are explained under \"Not run here\".", ""]


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


def failure_rows(df: pd.DataFrame, profile: str, impl_modules: list[str]) -> list[dict]:
    """The failed comparisons of real implementations, worst share of tolerance first, each
    with the command that reproduces only it."""
    if df.empty:
        return []
    bad = df[(df["verdict"] == "fail") & ~seeded(df)]
    if bad.empty:
        return []
    key = bad["tol_used"] if "tol_used" in bad else pd.Series(0, index=bad.index)
    bad = bad.assign(_key=pd.to_numeric(key, errors="coerce").fillna(float("inf")))
    bad = bad.sort_values("_key", ascending=False)
    return [{"op": row["op"], "impl": row["impl"], "case": row["case"], "check": row["check"],
             "output": row.get("output", "?"), "detail": row.get("detail", ""),
             "tokens": row.get("tokens"), "case_op": row.get("case_op", row["op"]),
             "kind": failure_kind(row),
             "command": repro_command(row, profile, impl_modules)} for _, row in bad.iterrows()]


def failure_groups(df: pd.DataFrame, profile: str, impl_modules: list[str],
                   cases_dir=None) -> list[dict]:
    """The failures grouped by cause, one group per (implementation, op, output, kind of
    failure), worst group first: its count of failed cases, the token range, the worst case
    with the command that reproduces it and, where the case was saved, the one that replays
    it; the individual failures (worst first) under ``failures``."""
    rows = failure_rows(df, profile, impl_modules)
    groups: dict[tuple, dict] = {}
    for row in rows:
        key = (row["impl"], row["op"], str(row["output"]).split("/")[0], row["kind"])
        group = groups.setdefault(key, {"impl": key[0], "op": key[1], "output": key[2],
                                        "kind": key[3], "failures": []})
        group["failures"].append(row)
    out = []
    for group in groups.values():
        failures = group["failures"]
        tokens = [int(f["tokens"]) for f in failures if pd.notna(f.get("tokens"))]
        worst = failures[0]
        out.append({**group, "cases": len({f["case"] for f in failures}),
                    "checks": sorted({str(f["check"]) for f in failures}),
                    "tokens": (min(tokens), max(tokens)) if tokens else None, "worst": worst,
                    "replay": _replay(worst, impl_modules, cases_dir)})
    return out


def _replay(row: dict, impl_modules: list[str], cases_dir) -> str:
    if cases_dir is None:
        return ""
    from harness.cases.files import file_name

    path = cases_dir / file_name(str(row["case_op"]), str(row["impl"]), str(row["case"]),
                                 str(row["check"]))
    if not path.exists():
        return ""
    return " ".join(["harness", "replay", shlex.quote(str(path))]
                    + [f"--impl-module {shlex.quote(m)}" for m in impl_modules])


def failures(df: pd.DataFrame, profile: str, impl_modules: list[str], cases_dir=None,
             limit: int = 30) -> list[str]:
    """Markdown of ``failure_groups``: each group with its count, token range and worst case,
    the commands for that case, then its individual failures (at most five a group)."""
    groups = failure_groups(df, profile, impl_modules, cases_dir)
    if not groups:
        return []
    total = sum(len(g["failures"]) for g in groups)
    lines = [f"## Failures ({total} in {len(groups)} group(s) by cause; worst first)", ""]
    for g in groups[:limit]:
        span = (f", T {g['tokens'][0]}..{g['tokens'][1]}" if g["tokens"] and
                g["tokens"][0] != g["tokens"][1] else f", T {g['tokens'][0]}" if g["tokens"] else "")
        worst = g["worst"]
        lines.append(f"- **{g['op']} / {g['impl']}**, output `{g['output']}`, {g['kind']}: "
                     f"{g['cases']} case(s){span}, seen by {', '.join(g['checks'])}. Worst: "
                     f"`{worst['case']}` ({worst['check']}): {worst['detail']}")
        if worst["command"]:
            lines.append(f"  - reproduce: `{worst['command']}`")
        if g["replay"]:
            lines.append(f"  - replay: `{g['replay']}`")
        for f in g["failures"][1:6]:
            lines.append(f"  - also `{f['case']}` ({f['check']}, `{f['output']}`): "
                         f"{str(f['detail'])[:160]}")
        if len(g["failures"]) > 6:
            lines.append(f"  - ... {len(g['failures']) - 6} more in results*.csv")
    if len(groups) > limit:
        lines.append(f"- ... {len(groups) - limit} more groups in results*.csv")
    return lines + [""]


def with_unrecorded_failures(df: pd.DataFrame, failed_cases: Iterable[dict]) -> pd.DataFrame:
    """``df`` plus one failing row for each failed sweep-case test that recorded no failing row
    (it raised before its comparison: a crash on a view, a contract violation in the test's own
    set-up), its detail the exception."""
    failing = set(df.loc[df["verdict"] == "fail", "test"].astype(str)) \
        if not df.empty and "test" in df else set()
    extra = [{"op": c.get("case_op"), "case_op": c.get("case_op"), "impl": c.get("impl"),
              "case": c["test"].rsplit("[", 1)[-1].rstrip("]"), "check": "test", "output": "*",
              "verdict": "fail", "tokens": c.get("tokens"), "hidden": c.get("hidden"),
              "params": json.dumps(c.get("params") or {}), "test": c["test"],
              "detail": f"the test failed before it recorded a comparison: {c.get('error', '')}"}
             for c in failed_cases if c.get("test") and c["test"] not in failing]
    if not extra:
        return df
    return pd.concat([df, pd.DataFrame(extra)], ignore_index=True) if not df.empty \
        else pd.DataFrame(extra)
