"""The conformance matrix: vendor x release x implementation x op x input-space cell ->
pass, FAIL (the worst case, with the commands that reproduce and replay it), known deviation,
not run here (why), not this contract (why), or not in this profile.

Built from what a run already has, for every adapter alike (nothing here names a vendor): the
adapters' declarations (``harness.adapters``: which implementations a package provides, for
which ops), the registry's reasons for what cannot run, the result rows and skipped sweep cases
of the run folder, and each op's input space (``OpSpec.input_space``). A reason that begins
with ``NOT_THIS_CONTRACT`` (an entry, or a case an ``Unsupported`` selects) is "not this
contract"; any other reason is "not run here".
"""

from __future__ import annotations

import json
import pathlib
from typing import Iterable

import pandas as pd

from harness.adapters.base import NOT_THIS_CONTRACT
from harness.adapters.releases import RELEASE_KEY, adapters as _adapters, releases  # noqa: F401
from harness.core.input_space import case_values
from harness.core.results import KNOWN_DEVIATION
from harness.core.specs import all_specs
from harness.reports.tables import _replay, repro_command, with_unrecorded_failures

PASS, FAIL, KNOWN = "pass", "FAIL", "known deviation"
NOT_HERE, NOT_CONTRACT, ELSEWHERE = "not run here", "not this contract", "not in this profile"
NOT_JUDGED = "not judged"
RUNS_HERE = "runs here"
STATUSES = (FAIL, KNOWN, PASS, RUNS_HERE, NOT_CONTRACT, NOT_HERE, ELSEWHERE, NOT_JUDGED)
COLUMNS = ("vendor", "release", "impl", "op", "axis", "cell", "status", "cases", "failed",
           "why", "worst", "reproduce", "replay")
def _params(value) -> dict:
    if isinstance(value, dict):
        return value
    try:
        return json.loads(value) if isinstance(value, str) and value else {}
    except json.JSONDecodeError:
        return {}


def _status_of_reason(reason: str) -> tuple[str, str]:
    if reason.startswith(NOT_THIS_CONTRACT):
        return NOT_CONTRACT, reason[len(NOT_THIS_CONTRACT):]
    inner = reason.find(NOT_THIS_CONTRACT)
    if inner >= 0:
        return NOT_CONTRACT, reason[inner + len(NOT_THIS_CONTRACT):]
    return NOT_HERE, reason


def _worst(rows: pd.DataFrame) -> pd.Series:
    key = pd.to_numeric(rows["tol_used"], errors="coerce") if "tol_used" in rows else None
    if key is None or key.isna().all():
        return rows.iloc[0]
    return rows.loc[key.fillna(float("inf")).idxmax()]


def table(df: pd.DataFrame, skipped: Iterable[dict], profile: str,
          not_run: dict[tuple[str, str], str], release: dict[str, str] | None = None,
          impl_modules: list[str] | None = None, cases_dir: pathlib.Path | None = None,
          failed_cases: Iterable[dict] = ()) -> pd.DataFrame:
    """One row per (vendor, implementation, op, cell) of every adapter's implementations;
    ``not_run``: the registry's (op, implementation) -> reason for what cannot run here;
    ``failed_cases``: the sweep cases whose test failed (run.json), so that a test that raised
    before it recorded a row still fails its cell."""
    specs = all_specs()
    release = {**releases(), **(release or {})}
    skipped = list(skipped)
    df = with_unrecorded_failures(df, failed_cases)
    real = df[df["verdict"] != "not run"] if not df.empty else df
    out = []
    for adapter in _adapters():
        vendor_release = release.get(RELEASE_KEY.format(adapter.name), "?")
        for impl, ops in adapter.ops.items():
            for op in ops:
                spec = specs.get(op)
                base = {"vendor": adapter.name, "release": vendor_release, "impl": impl,
                        "op": op, "cases": 0, "failed": 0}
                if (op, impl) in not_run or spec is None or not spec.input_space.cells:
                    status, why = _status_of_reason(not_run.get((op, impl), "")) \
                        if (op, impl) in not_run else (NOT_JUDGED, "the op declares no cells")
                    out.append({**base, "axis": "", "cell": "every cell", "status": status,
                                "why": why})
                    continue
                mine = real[(real["impl"] == impl) & (real.get("case_op", real["op"]) == op)] \
                    if not real.empty else real
                values = [case_values(spec.case_params, r.tokens, r.hidden, _params(r.params))
                          for r in mine.itertuples()] if not mine.empty else []
                skips = [(case_values(spec.case_params, s.get("tokens"), s.get("hidden"),
                                      _params(s.get("params"))), s.get("reason", ""))
                         for s in skipped if s.get("case_op") == op and s.get("impl") == impl]
                for cell in spec.input_space.cells:
                    hits = [i for i, v in enumerate(values) if cell.matches(v)]
                    rows = mine.iloc[hits] if hits else None
                    out.append({**base, "axis": cell.axis, "cell": cell.name,
                                **_cell_status(rows, [r for v, r in skips if cell.matches(v)],
                                               cell, profile, impl_modules or [], cases_dir)})
    frame = pd.DataFrame(out)
    for col in COLUMNS:
        if col not in frame.columns:
            frame[col] = ""
    return frame[list(COLUMNS)].fillna("")


def _also_skipped(skip_reasons: list[str]) -> str:
    """What a cell judged on some cases says of the others: how many were not judged, and the
    commonest reason."""
    if not skip_reasons:
        return ""
    status, why = _status_of_reason(pd.Series(skip_reasons).value_counts().index[0])
    return f"{len(skip_reasons)} more case(s) {status}: {why}"


def _cell_status(rows: pd.DataFrame | None, skip_reasons: list[str], cell, profile: str,
                 impl_modules: list[str], cases_dir) -> dict:
    if rows is not None and not rows.empty:
        judged = _judged_status(rows, profile, impl_modules, cases_dir)
        notes = (judged.pop("deviation", ""), _also_skipped(skip_reasons))
        return {**judged, "why": "; ".join(n for n in notes if n)}
    if skip_reasons:
        status, why = _status_of_reason(pd.Series(skip_reasons).value_counts().index[0])
        return {"status": status, "why": why}
    if profile not in cell.profiles:
        return {"status": ELSEWHERE, "why": cell.elsewhere}
    return {"status": NOT_JUDGED, "why": f"no case of this cell was judged in this {profile} run"}


def _judged_status(rows: pd.DataFrame, profile: str, impl_modules: list[str], cases_dir) -> dict:
    cases = int(rows["case"].nunique())
    bad = rows[rows["verdict"] == "fail"]
    if not bad.empty:
        worst = _worst(bad)
        return {"status": FAIL, "cases": cases, "failed": int(bad["case"].nunique()),
                "worst": f"{worst['case']} ({worst['check']}, {worst.get('output', '?')}): "
                         f"{str(worst.get('detail', ''))[:200]}",
                "reproduce": repro_command(worst, profile, impl_modules),
                "replay": _replay(worst.to_dict(), impl_modules, cases_dir)}
    known = rows[rows["verdict"] == KNOWN_DEVIATION]
    if not known.empty:
        return {"status": KNOWN, "cases": cases, "failed": 0,
                "deviation": str(known.iloc[0].get("known_deviation", ""))}
    return {"status": PASS, "cases": cases, "failed": 0}


def markdown(matrix: pd.DataFrame, profile: str) -> list[str]:
    """The summary's section: per vendor and release, one line per (implementation, op) with
    the cells grouped by status; every failing cell on its own line with its worst case.
    (Grouped over plain records: pandas' per-group selections cost ~2 s a report.)"""
    if matrix.empty:
        return []
    lines = [f"## Vendor conformance (profile `{profile}`)", "",
             "Each vendor's implementations, per op and input-space cell: pass, FAIL (worst "
             "case, reproduce/replay), known deviation, not run here (why), not this contract "
             "(why). `harness vendors DIR` prints it for a run folder.", ""]
    for (vendor, release), mine in _grouped(matrix.to_dict("records"), "vendor", "release"):
        lines += [f"### {vendor} ({release})", ""]
        kinds = {(r["status"], r["why"]) for r in mine}
        if len(kinds) == 1:
            status, why = kinds.pop()
            lines += [f"Every implementation, op and cell: {status}"
                      + (f" ({_cell_text(why)})" if why else "")
                      + f"; implementations {', '.join(dict.fromkeys(r['impl'] for r in mine))}.",
                      ""]
            continue
        lines += ["| implementation | op | status | cells |", "| --- | --- | --- | --- |"]
        for (impl, op), rows in _grouped(mine, "impl", "op"):
            for status in STATUSES:
                group = [r for r in rows if r["status"] == status]
                if status == FAIL:
                    for r in group:
                        how = "; ".join(f"{k}: `{r[k]}`" for k in ("reproduce", "replay") if r[k])
                        lines.append(f"| {impl} | {op} | **FAIL** | {r['axis']}/{r['cell']}: "
                                     f"{r['failed']} of {r['cases']} case(s); worst "
                                     f"{_cell_text(r['worst'])}{'; ' + how if how else ''} |")
                    continue
                for (why,), same in _grouped(group, "why"):
                    cells = ", ".join(_cell_name(r) for r in same)
                    note = f" ({_cell_text(why)[:240]})" if why else ""
                    lines.append(f"| {impl} | {op} | {status} | {_cell_text(cells)}{note} |")
        lines.append("")
    return lines


def _grouped(records: list[dict], *keys: str) -> list[tuple[tuple, list[dict]]]:
    """``records`` grouped by ``keys``, groups and their members in first-seen order."""
    groups: dict[tuple, list[dict]] = {}
    for r in records:
        groups.setdefault(tuple(r[k] for k in keys), []).append(r)
    return list(groups.items())


def _cell_name(row: dict) -> str:
    return row["cell"] if not row["axis"] else f"{row['axis']}/{row['cell']}"


def _cell_text(text: str) -> str:
    return str(text).replace("|", "/").replace("\n", " ")


def failed(matrix: pd.DataFrame) -> pd.DataFrame:
    return matrix[matrix["status"] == FAIL] if not matrix.empty else matrix


CSS = {PASS: "pass", FAIL: "fail", KNOWN: "known", RUNS_HERE: "pass", NOT_HERE: "notrun",
       NOT_CONTRACT: "notrun",
       ELSEWHERE: "notrun", NOT_JUDGED: "notrun"}


def html_groups(matrix: pd.DataFrame) -> list[dict]:
    """For report.html: one group per (vendor, release) with its status counts and rows."""
    groups = []
    if matrix.empty:
        return groups
    for (vendor, release), mine in matrix.groupby(["vendor", "release"], sort=False):
        counts = mine["status"].value_counts()
        groups.append({"vendor": vendor, "release": release,
                       "counts": ", ".join(f"{int(counts[s])} {s}" for s in STATUSES
                                           if s in counts),
                       "failed": bool((mine["status"] == FAIL).any()),
                       "rows": [{**r, "css": CSS[r["status"]]}
                                for r in mine.to_dict("records")]})
    return groups


def entries(not_run: dict[tuple[str, str], str]) -> pd.DataFrame:
    """Without a run: every adapter's (implementation, op) on this machine: runs here, not run
    here (why) or not this contract (why)."""
    release = releases()
    out = []
    for adapter in _adapters():
        for impl, ops in adapter.ops.items():
            for op in ops:
                status, why = _status_of_reason(not_run[(op, impl)]) if (op, impl) in not_run \
                    else (RUNS_HERE, "")
                out.append({"vendor": adapter.name,
                            "release": release.get(RELEASE_KEY.format(adapter.name), "?"),
                            "impl": impl, "op": op, "axis": "", "cell": "every cell",
                            "status": status, "cases": 0, "failed": 0, "why": why,
                            "worst": "", "reproduce": "", "replay": ""})
    return pd.DataFrame(out, columns=list(COLUMNS))
