"""The coverage table of a run: for every op it judged, each cell of the op's input space
(harness.core.input_space) with the cases judged in it, those skipped and why, and the cells the
profile leaves out by design.

Judged cases come from the result rows (their ``case_op`` and ``params``); skipped ones from the
run's skip tally (``run.json``'s ``skipped_cases``: the sweep targets pytest skipped, with the
reason). A cell its profile declares but that nothing judged is a gap, shown as such.
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
import tempfile
from typing import Any, Iterable

import pandas as pd

from harness.core.input_space import case_values
from harness.core.specs import all_specs
from harness.reports.tables import seeded

PLAN_ENV = "HARNESS_COVERAGE_PLAN"
"""Where a collection writes its sweep cases, one JSON object a line, with the skip reason of
those that would not run here (``planned``; the pytest plugin writes it)."""
JUDGED = "judged"
FAILED = "FAILED"
SKIPPED = "skipped"
ELSEWHERE = "not in this profile"
GAP = "NOT JUDGED"


def _params(value: Any) -> dict:
    if isinstance(value, dict):
        return value
    if isinstance(value, str) and value:
        try:
            return json.loads(value)
        except json.JSONDecodeError:
            return {}
    return {}


def _judged_cases(df: pd.DataFrame) -> pd.DataFrame:
    """One row per (case op, case id, impl) judged by a real implementation, with its values and
    whether any of its comparisons failed."""
    if df.empty or "params" not in df.columns:
        return pd.DataFrame(columns=["case_op", "case", "impl", "tokens", "hidden", "params",
                                     "failed"])
    real = df[~seeded(df) & (df["verdict"] != "not run")].copy()
    real["case_op"] = real["case_op"].fillna(real["op"]) if "case_op" in real else real["op"]
    real["failed"] = real["verdict"] == "fail"
    grouped = real.groupby(["case_op", "case", "impl"], sort=False, dropna=False).agg(
        tokens=("tokens", "first"), hidden=("hidden", "first"), params=("params", "first"),
        failed=("failed", "any"))
    return grouped.reset_index()


def table(df: pd.DataFrame, skipped: Iterable[dict], profile: str) -> dict[str, list[dict]]:
    """op -> one row per cell: ``axis``, ``cell``, ``what``, ``judged`` (distinct cases),
    ``failed`` (cases with a failing comparison), ``impls``, ``skipped``, ``status``, ``why``."""
    specs = all_specs()
    judged = _judged_cases(df)
    skipped = list(skipped)
    ops = [op for op in specs if specs[op].input_space.cells
           and (op in set(judged["case_op"]) or any(s.get("case_op") == op for s in skipped))]
    out: dict[str, list[dict]] = {}
    for op in ops:
        spec = specs[op]
        mine = judged[judged["case_op"] == op]
        values = [case_values(spec.case_params, r.tokens, r.hidden, _params(r.params))
                  for r in mine.itertuples()]
        skips = [(case_values(spec.case_params, s.get("tokens"), s.get("hidden"),
                              _params(s.get("params"))), s.get("reason", ""))
                 for s in skipped if s.get("case_op") == op]
        rows = []
        for cell in spec.input_space.cells:
            hits = [i for i, v in enumerate(values) if cell.matches(v)]
            cases = mine.iloc[hits] if hits else mine.iloc[0:0]
            skip_reasons = [reason for v, reason in skips if cell.matches(v)]
            n_cases = int(cases["case"].nunique())
            n_failed = int(cases.loc[cases["failed"].astype(bool), "case"].nunique())
            if n_cases:
                status = FAILED if n_failed else JUDGED
                why = ""
            elif skip_reasons:
                status, why = SKIPPED, pd.Series(skip_reasons).value_counts().index[0]
            elif profile not in cell.profiles:
                status, why = ELSEWHERE, cell.elsewhere
            else:
                status = GAP
                why = (f"declared for the {profile} profile, but no case of it was judged in "
                       "this run (a selection such as --impl, -k or --ops, or a sweep that lost "
                       "it)")
            rows.append({"axis": cell.axis, "cell": cell.name, "what": cell.what,
                         "judged": n_cases, "failed": n_failed,
                         "impls": ", ".join(sorted(set(cases["impl"].astype(str)))),
                         "skipped": len(skip_reasons), "status": status, "why": why})
        out[op] = rows
    return out


def gaps(cov: dict[str, list[dict]]) -> list[str]:
    return [f"{op}: {r['axis']}/{r['cell']}" for op, rows in cov.items() for r in rows
            if r["status"] == GAP]


def markdown(cov: dict[str, list[dict]], profile: str) -> list[str]:
    """One table per op, cells in declaration order."""
    if not cov:
        return []
    lines = [f"## Input-space coverage (profile `{profile}`)", "",
             "Each op's declared cells (values, sizes, metadata): the distinct cases judged in "
             "each, how many failed, and why a cell was skipped or is left to another profile.",
             ""]
    missing = gaps(cov)
    if missing:
        more = f"; and {len(missing) - 12} more (tables below)" if len(missing) > 12 else ""
        lines += [f"**{len(missing)} declared cell(s) judged by no case:** "
                  + "; ".join(missing[:12]) + more, ""]
    for op, rows in cov.items():
        lines += [f"### {op}", "", "| axis | cell | judged | failed | status | inputs / why |",
                  "| --- | --- | --- | --- | --- | --- |"]
        for r in rows:
            note = r["why"] or r["what"]
            status = f"**{r['status']}**" if r["status"] in (FAILED, GAP) else r["status"]
            lines.append(f"| {r['axis']} | {r['cell']} | {r['judged']} | {r['failed']} | "
                         f"{status} | {note.replace('|', '/')} |")
        lines.append("")
    return lines


def planned(profile: str) -> tuple[dict[str, list[dict]], int]:
    """The coverage table a run of ``profile`` would have on this machine, from a collection of
    the suites (nothing runs): swept cases count as judged, those pytest would skip here as
    skipped with their reason. Also the number of cases collected."""
    suites = pathlib.Path(__file__).resolve().parents[2] / "suites"
    with tempfile.TemporaryDirectory() as tmp:
        plan = pathlib.Path(tmp) / "plan.jsonl"
        env = {**os.environ, PLAN_ENV: str(plan)}
        done = subprocess.run([sys.executable, "-m", "pytest", str(suites), "--collect-only", "-q",
                               "-p", "no:cacheprovider", "-p", "no:xdist", "--profile", profile],
                              capture_output=True, text=True, env=env, cwd=suites.parent)
        if not plan.exists():
            raise RuntimeError(f"collecting the suites for profile {profile} failed "
                               f"(exit {done.returncode}):\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
        entries = [json.loads(line) for line in plan.read_text().splitlines() if line]
    swept = [e for e in entries if not e["reason"]]
    rows = pd.DataFrame([{"op": e["case_op"], "case_op": e["case_op"], "impl": e["impl"],
                          "case": e["id"], "tokens": e["tokens"], "hidden": e["hidden"],
                          "params": json.dumps(e["params"]), "verdict": "pass"} for e in swept])
    skipped = [e for e in entries if e["reason"]]
    return table(rows, skipped, profile), len(entries)
