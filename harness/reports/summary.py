"""A run folder's reports: the Markdown summary (what ran, what failed worst first, what could not
run and why, the environment) and the HTML page with plots. ``harness report DIR`` rebuilds both
from the saved results."""

from __future__ import annotations

import glob
import json
import pathlib

import pandas as pd

from harness.reports import coverage, judged as judged_report, tables as report_tables, vendors
from harness.reports.durations import where_time_went
from harness.core.registry import unavailable
from harness.core.results import KNOWN_DEVIATION
from harness.core.verdicts import folder_verdict
from harness.environment import environment
from harness.reports.meta import (new_report_folder, read_meta, record_verdict,  # noqa: F401
                                  update_meta, write_meta)


def _limits(meta: dict) -> list[str]:
    """The run's per-case time limit and the tests that ran past it."""
    limit = meta.get("case_time_limit_s")
    if not limit:
        return []
    late = meta.get("timed_out") or []
    return [f"Per-case time limit: {limit:g} s (profile `{meta.get('profile', '?')}`; "
            "`-- --timeout S` sets another)" + (f"; {len(late)} test(s) ran past it: "
                                                 + ", ".join(f"`{t}`" for t in late)
                                                 if late else ""), ""]


def load_results(folder: pathlib.Path) -> pd.DataFrame:
    files = sorted(glob.glob(str(folder / "results*.csv")))
    if not files:
        return pd.DataFrame()
    return pd.concat([pd.read_csv(f) for f in files], ignore_index=True)


def fuzz_section(folder: pathlib.Path) -> list[str]:
    """The fuzzing after the sweep (``fuzz/fuzz.json``): its verdict and each shrunk failure."""
    path = folder / "fuzz" / "fuzz.json"
    if not path.exists():
        return []
    data = json.loads(path.read_text())
    head = {0: "PASS", 1: "FAIL"}.get(data.get("verdict"), "COULD NOT TEST")
    lines = ["## Fuzzing after the sweep", "",
             f"{head}: {data.get('why', '')} (budget {data.get('minutes')} min, seed "
             f"{data.get('seed')}; fuzz/fuzz.md)", ""]
    for f in data.get("failures", []):
        lines.append(f"- **{f['op']} / {f['impl']}**, `{f['output']}`, {f['kind']}: {f['minimal']}")
        if f.get("replay"):
            lines.append(f"  - replay: `{f['replay']}`")
    return lines + [""]


def write_summary(folder: pathlib.Path, profile: str, pytest_exit: int) -> pathlib.Path:
    """``summary.md`` and ``report.html``: the same findings, for a terminal and a browser."""
    meta = read_meta(folder)
    df = report_tables.with_unrecorded_failures(load_results(folder),
                                                meta.get("failed_cases") or [])
    judged = folder_verdict(folder, {**meta, "pytest_exit": int(pytest_exit)})
    record_verdict(folder, judged)
    why, verdict = judged.why, judged.headline
    lines = [f"# Verdict: {verdict} (profile `{profile}`)", "", why, ""]
    lines += _limits(meta)
    modules, wanted = _run_option(folder, "--impl-module"), set(_run_option(folder, "--impl"))
    missing = {**unavailable(), **judged_report.not_selected(meta)}
    notes = {key: judged_report.cell_note(c) for key, c in judged_report.counts(meta).items()}
    if not df.empty:
        lines += report_tables.self_check(df)
        lines += report_tables.failures(df, profile, modules, folder / "cases")
    shown = df[df["impl"].isin(wanted)] if wanted and not df.empty else df
    ops_run = set(_run_option(folder, "--op")) | (
        set(shown.loc[~report_tables.seeded(shown), "op"].astype(str)) if not shown.empty else set())
    if ops_run:  # what could not run or was not selected, of the ops this run is about
        missing = {key: why for key, why in missing.items() if key[0] in ops_run}
    labels = {name: f"{name} (shown, not judged)" for name in
              (set(shown["impl"].astype(str)) if not shown.empty else ())
              if "judged" in meta and name not in meta["judged"]}
    lines += report_tables.matrix(shown, missing, notes, labels) if not shown.empty or missing \
        else []
    lines += judged_report.markdown(meta)
    deviations = _known_deviations(df) if not df.empty else []
    cases = _saved_cases(folder)
    lines += deviations + cases
    cov = coverage.table(df, meta.get("skipped_cases") or [], profile)
    lines += coverage.markdown(cov, profile)
    matrix = vendors.table(df, meta.get("skipped_cases") or [], profile, unavailable(),
                           meta.get("environment") or {}, modules, folder / "cases",
                           failed_cases=meta.get("failed_cases") or [])
    matrix.to_csv(folder / "vendors.csv", index=False)
    lines += vendors.markdown(matrix, profile)
    not_run = []
    if missing:
        grouped: dict[tuple[str, str], list[str]] = {}
        for (op, name), reason in sorted(missing.items()):
            grouped.setdefault((name, reason), []).append(op)
        not_run = [f"{name} ({', '.join(ops)}): {reason}" for (name, reason), ops in grouped.items()]
        lines += ["## Not run here", ""] + [f"- {line}" for line in not_run] + [""]
    lines += fuzz_section(folder)
    lines += where_time_went(folder)
    env = meta.get("environment") or environment()
    lines += ["## Environment", ""] + [f"- {k}: {v}" for k, v in env.items()]
    trend = folder / "trend.md"
    if trend.exists():
        lines += ["", trend.read_text()]
    path = folder / "summary.md"
    path.write_text("\n".join(lines) + "\n")
    impls, ops, cells = report_tables.matrix_cells(shown, missing, notes) \
        if not shown.empty or missing else ([], [], {})
    self_check = report_tables.self_check(df) if not df.empty else []
    write_html(folder, df, {
        "verdict": verdict, "verdict_class": judged.css_class,
        "why": why, "profile": profile, "seconds": meta.get("seconds"),
        "started": meta.get("started", ""),
        "self_check": self_check[0].replace("**", "") if self_check else "",
        "impls": impls, "ops": ops, "cells": cells,
        "failure_groups": report_tables.failure_groups(df, profile, modules, folder / "cases"),
        "coverage": cov, "coverage_gaps": coverage.gaps(cov),
        "vendor_matrix": vendors.html_groups(matrix),
        "impl_labels": labels,
        "judged_intro": [line for line in judged_report.markdown(meta)[2:]
                         if line and not line.startswith("|")],
        "judged_rows": judged_report.table(meta), "skip_columns": judged_report.SKIP_COLUMNS,
        "lists": [("Known deviations (third-party, documented; not failures)",
                   [line[2:] for line in deviations if line.startswith("- ")]),
                  ("Saved failing cases (replay on any machine, exit 0/1/125)",
                   [line[2:].replace("`", "") for line in cases if line.startswith("- ")]),
                  ("Not run here", not_run)],
        "environment": env})
    return path


def _run_option(folder: pathlib.Path, flag: str) -> list[str]:
    """The values the run was given for a repeatable pytest option (from run.json's argv);
    ``--impl-module`` paths made absolute against the run's working directory."""
    meta = read_meta(folder)
    argv = meta.get("argv", [])
    values = [argv[i + 1] for i, a in enumerate(argv[:-1]) if a == flag]
    if flag == "--impl-module" and meta.get("cwd"):
        values = [str(pathlib.Path(meta["cwd"]) / v) if v.endswith(".py") else v for v in values]
    return values


def _saved_cases(folder: pathlib.Path) -> list[str]:
    """The failing cases saved for ``harness replay`` (and those over the run's size budget)."""
    cases = folder / "cases"
    saved = sorted(cases.glob("*.pt")) if cases.is_dir() else []
    skipped = (cases / "not_saved.txt").read_text().splitlines() \
        if (cases / "not_saved.txt").exists() else []
    if not saved and not skipped:
        return []
    extra = "".join(f" --impl-module {m}" for m in _run_option(folder, "--impl-module"))
    lines = ["## Saved failing cases (replay on any machine, exit 0/1/125)", ""]
    lines += [f"- `harness replay {p}{extra}`" for p in saved[:50]]
    if len(saved) > 50:
        lines.append(f"- ... and {len(saved) - 50} more in {cases}")
    lines += [f"- not saved: {line}" for line in skipped]
    return lines + [""]


def _known_deviations(df: pd.DataFrame) -> list[str]:
    """Third-party disagreements with the contract that the adapters document: counted apart
    from failures (their tests are strict xfails), each with its reason."""
    if "known_deviation" not in df.columns:
        return []
    known = df[df["verdict"] == KNOWN_DEVIATION]
    if known.empty:
        return []
    lines = ["## Known deviations from the contract (third-party, documented; not failures)", ""]
    for (impl, op, reason), rows in known.groupby(["impl", "op", "known_deviation"]):
        lines.append(f"- {impl} / {op}: {len(rows)} comparison(s). {reason}")
    return lines + [""]


def write_html(folder: pathlib.Path, df: pd.DataFrame, page: dict) -> pathlib.Path:
    """``report.html`` from ``templates/report.html`` (Jinja2, autoescaped): the verdict, the
    coloured implementation x op matrix, collapsible failures with their reproduce command,
    the plots and the environment."""
    import jinja2

    from harness.reports.plots import make_plots

    plots = make_plots(df, folder) if not df.empty else []
    env = jinja2.Environment(loader=jinja2.PackageLoader("harness.reports", "templates"),
                             autoescape=True, undefined=jinja2.StrictUndefined)
    html = env.get_template("report.html").render(
        **page, plots=[{"file": p.name, "title": p.stem.replace("_", " ")} for p in plots])
    path = folder / "report.html"
    path.write_text(html)
    return path


