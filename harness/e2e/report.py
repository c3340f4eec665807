"""The E2E part of a report: e2e_summary.md, e2e.html with the accuracy plot, per-question diff."""

from __future__ import annotations

import html
import pathlib

import pandas as pd

from harness.e2e.golden import METRICS


def summary_markdown(summary: dict, changes: pd.DataFrame) -> str:
    meta, gold = summary["meta"], summary["golden"]
    lines = [f"# E2E GSM8K: {summary['verdict'].upper()}", "",
             f"- model: {meta['model']} (served as {meta.get('served_model', '?')})",
             f"- server: {meta['server']['kind']} {meta['server'].get('base_url') or ''}",
             f"- task: {meta['task']['num_fewshot']}-shot, limit {meta['task']['limit']}, "
             f"gen_kwargs {meta['task']['gen_kwargs'] or 'task defaults (greedy)'}",
             f"- golden: {gold['name'] + ' (' + gold['source'] + ')' if gold else 'none'}", "",
             "| concurrency | verdict | n | " + " | ".join(f"{m} (± stderr)" for m in METRICS)
             + " | min detectable drop (95% power) |",
             "| --- | --- | --- | " + " | ".join("---" for _ in METRICS) + " | --- |"]
    for lv in summary["levels"]:
        if lv.get("error"):
            lines.append(f"| {lv['level']} | error | - | " + " | ".join("-" for _ in METRICS) + " | - |")
            continue
        accs = " | ".join(f"{lv['metrics'][m]['acc']:.4f} ± {lv['metrics'][m]['stderr'] or 0:.4f}"
                          for m in METRICS)
        mde = lv.get("min_detectable_drop")
        lines.append(f"| {lv['level']} | {lv['verdict']} | {lv['n']} | {accs} | "
                     f"{'n/a' if mde is None else f'{mde:.3f}'} |")
    lines += ["", "## Why", ""]
    for lv in summary["levels"]:
        for reason in lv.get("reasons") or []:
            lines.append(f"- c{lv['level']}: " + reason.replace("\n", "\n    "))
    lines += ["", "## What each level was compared with", ""]
    for lv in summary["levels"]:
        for basis in lv.get("basis") or []:
            lines.append(f"- c{lv['level']} vs {basis}")
    lines += _drift_lines(summary["levels"])
    fp = meta.get("fingerprint") or {}
    if fp:
        lines += ["", "Fingerprint of this run (exact outputs are compared with a golden only "
                  "when all of it matches): " + ", ".join(f"{k}={v}" for k, v in fp.items()
                                                          if k != "system_info")]
    if summary["tests"]:
        lines += ["", "## Tests", "", "```",
                  pd.DataFrame(summary["tests"])[["level", "against", "metric", "test", "drop",
                                                  "p_value", "alpha", "significant", "detail"]]
                  .to_string(index=False), "```"]
    if not changes.empty:
        flips = changes[(changes[[f"flip_{m}" for m in METRICS]] != "").any(axis=1)]
        changed = changes[changes.get("output_changed", pd.Series(False, index=changes.index))
                          .fillna(False).astype(bool)]
        lines += ["", f"## Per-question diff ({len(flips)} correctness flips, {len(changed)} "
                  "changed outputs; full table: per_question_diff.csv)", ""]
        if not changed.empty:
            cols = [c for c in ("level", "against", "doc_id", "first_divergence", "base_snippet",
                                "run_snippet") if c in changed]
            lines += ["```", changed[cols].head(20).to_string(index=False), "```"]
    return "\n".join(lines) + "\n"


def _drift_lines(levels: list[dict]) -> list[str]:
    rows = [(lv["level"], d) for lv in levels for d in lv.get("drift") or []]
    if not rows:
        return []
    lines = ["", "## Logprob drift (greedy continuations, token by token)", "",
             "| concurrency | against | verdict | questions | identical | near-tie flips | "
             "confident flips | max abs delta logprob | mean top-N overlap |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    worst = []
    for level, d in rows:
        lines.append(f"| {level} | {d['against']} | {d['verdict']} | {d['questions']} | "
                     f"{d['identical']} | {d['near_tie']} | {d['confident']} | "
                     f"{d['worst_delta']:.4f} | {d['mean_overlap']:.3f} |")
        worst += [{"level": level, "against": d["against"], **w} for w in d["worst"]]
    moved = [w for w in worst if w["flip"] != "none" or w["max_delta"] > 0]
    if moved:
        lines += ["", "Questions that drifted most (divergence: first differing token; margin: "
                  "how much a side preferred its own token there, in nats):", "", "```",
                  pd.DataFrame(moved)[["level", "against", "question", "agreed", "max_delta",
                                       "divergence", "flip", "margin"]]
                  .to_string(index=False), "```"]
    return lines


def write_e2e_report(folder: pathlib.Path, summary: dict, changes: pd.DataFrame) -> pathlib.Path:
    from harness.e2e.plots import e2e_accuracy

    md = summary_markdown(summary, changes)
    (folder / "e2e_summary.md").write_text(md)
    png = e2e_accuracy(summary["levels"], summary["golden"], folder / "e2e_accuracy.png")
    page = ["<!doctype html><meta charset='utf-8'><title>E2E GSM8K</title>",
            "<style>body{font-family:sans-serif;max-width:1400px;margin:auto}"
            "pre{background:#f6f6f6;padding:8px;overflow:auto}</style>",
            f"<h1>E2E GSM8K: {html.escape(summary['verdict'])}</h1>",
            f"<img src='{png.name}' style='max-width:100%'>",
            "<pre>", html.escape(md), "</pre>"]
    path = folder / "e2e.html"
    path.write_text("\n".join(page))
    return path
