"""The Markdown summary of a run folder: what ran, what failed (worst first), what could not run
and why, and the environment."""

from __future__ import annotations

import glob
import pathlib

import pandas as pd

from harness import device
from harness.registry import unavailable


def load_results(folder: pathlib.Path) -> pd.DataFrame:
    files = sorted(glob.glob(str(folder / "results*.csv")))
    if not files:
        return pd.DataFrame()
    return pd.concat([pd.read_csv(f) for f in files], ignore_index=True)


def write_summary(folder: pathlib.Path, profile: str, pytest_exit: int) -> pathlib.Path:
    df = load_results(folder)
    lines = [f"# Harness run: profile `{profile}`", ""]
    verdict = {0: "PASS", 1: "FAIL"}.get(pytest_exit, f"COULD NOT TEST (pytest exit {pytest_exit})")
    lines += [f"**Verdict: {verdict}**", ""]
    if not df.empty:
        counts = df.groupby(["op", "impl", "check"])["verdict"].value_counts().unstack(fill_value=0)
        lines += ["## Checks", "", counts.to_markdown() if _has_tabulate() else
                  "```\n" + counts.to_string() + "\n```", ""]
        failed = df[df["verdict"] != "pass"]
        if not failed.empty:
            worst = failed.sort_values("max_abs", ascending=False, na_position="last").head(20)
            lines += ["## Failures (worst first)", "", "```",
                      worst[["op", "impl", "case", "check", "output", "max_abs", "detail"]]
                      .to_string(index=False), "```", ""]
        acc = df[(df["check"] == "accuracy") & df["max_abs"].notna()]
        if not acc.empty:
            table = acc.pivot_table(index=["op", "output", "impl"], columns="tokens",
                                    values="max_abs", aggfunc="max")
            lines += ["## Max abs error per (op, output, impl) and token count", "", "```",
                      table.to_string(float_format=lambda v: f"{v:.2e}"), "```", ""]
    missing = unavailable()
    if missing:
        lines += ["## Not run here", ""] + [f"- {op}/{name}: {why}"
                                           for (op, name), why in sorted(missing.items())] + [""]
    lines += ["## Environment", ""] + [f"- {k}: {v}" for k, v in device.describe().items()]
    path = folder / "summary.md"
    path.write_text("\n".join(lines) + "\n")
    return path


def _has_tabulate() -> bool:
    try:
        import tabulate  # noqa: F401
        return True
    except ImportError:
        return False
