"""What each implementation was judged on: per implementation and op, its sweep cases judged and
those skipped, by why (its own declarations, cost, the machine), and whether the run judges it
(its failures and coverage decide the exit code) or only shows it. From run.json's ``judged``,
``coverage`` and ``registered`` (harness.pytest_plugin.judging)."""

from __future__ import annotations

from harness.core.verdicts import DECLARED_SKIPS, coverage_shortfalls

SKIP_COLUMNS = ("declared", "cost", "interpreter", "device", "other")
SKIP_MEANING = {"declared": "its Unsupported inputs", "cost": "its CostLimit",
                "interpreter": "the CPU's Triton interpreter limits",
                "device": "GPU-only tests without a GPU",
                "other": "a check that does not apply to it"}


def counts(meta: dict) -> dict[tuple[str, str], dict[str, int]]:
    """(impl, op) -> {judged, declared, cost, interpreter, device, other}."""
    return {(row["impl"], row["op"]): {k: int(row.get(k, 0)) for k in ("judged",) + SKIP_COLUMNS}
            for row in meta.get("coverage") or []}


def cell_note(count: dict[str, int] | None) -> str:
    """The matrix cell's coverage: ``12/14 cases`` and, where the implementation's own
    declarations skipped some, how many."""
    if not count:
        return ""
    total = sum(count.values())
    note = f"{count['judged']}/{total} cases"
    declared = sum(count[k] for k in DECLARED_SKIPS)
    return note + (f", {declared} skipped by its declarations" if declared else "")


def not_selected(meta: dict) -> dict[tuple[str, str], str]:
    """(op, impl) -> why, for the available implementations a run's ``--impl`` left out."""
    wanted = set(meta.get("impl_wanted") or [])
    if not wanted:
        return {}
    why = (f"not selected: this run's --impl ({', '.join(sorted(wanted))}) leaves it out; "
           "--impl NAME judges it")
    return {(op, name): why for name, entry in (meta.get("registered") or {}).items()
            if name not in wanted for op in entry.get("ops", [])}


def table(meta: dict) -> list[dict]:
    """One row per (impl, op) counted, judged implementations first."""
    judged = set(meta.get("judged") or ())
    share = meta.get("max_declared_skip_share")
    short = {line.split(":", 1)[0] for line in coverage_shortfalls(meta)}
    rows = []
    for (impl, op), count in counts(meta).items():
        ran, declared = count["judged"], sum(count[k] for k in DECLARED_SKIPS)
        if f"{impl}/{op}" in short:
            status = "short, accepted" if meta.get("accept_partial_coverage") else "SHORT"
        else:
            status = "ok" if impl in judged else "shown, not judged"
        rows.append({"impl": impl, "op": op, **count, "judges": impl in judged,
                     "declared_share": declared / (ran + declared) if ran + declared else 0.0,
                     "status": status, "share": share})
    return sorted(rows, key=lambda r: (not r["judges"], r["impl"], r["op"]))


def markdown(meta: dict) -> list[str]:
    rows = table(meta)
    if "judged" not in meta:
        return []
    share = meta.get("max_declared_skip_share")
    judged = ", ".join(meta.get("judged") or []) or "none"
    lines = ["## What was judged", "",
             f"Judged (their failures and coverage decide the exit code): {judged}; "
             f"{meta.get('judged_how', '')}. Other implementations run and show in the matrix.",
             ""]
    if share is not None:
        lines += [f"A judged implementation may skip at most {share:.0%} of an op's cases by its "
                  "own declarations (Unsupported inputs, a CostLimit), and must be judged on at "
                  "least one case of each op it runs, for the run to be good"
                  + (" (accepted here: --accept-partial-coverage)"
                     if meta.get("accept_partial_coverage") else "") + ". Skipped: "
                  + "; ".join(f"{k}: {v}" for k, v in SKIP_MEANING.items()) + ".", ""]
    if not rows:
        return lines
    lines += ["| implementation | op | judged | " + " | ".join(SKIP_COLUMNS)
              + " | declared share | status |",
              "| --- | --- | --- |" + " --- |" * len(SKIP_COLUMNS) + " --- | --- |"]
    for r in rows:
        status = f"**{r['status']}**" if r["status"] == "SHORT" else r["status"]
        lines.append(f"| {r['impl']} | {r['op']} | {r['judged']} | "
                     + " | ".join(str(r[k]) for k in SKIP_COLUMNS)
                     + f" | {r['declared_share']:.0%} | {status} |")
    return lines + [""]
