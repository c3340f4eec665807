"""Figures of a run (matplotlib, Agg): the large-token precision picture and the batch picture.

A figure plots a value against token counts (or rows): a run whose results hold one such count
has no line to draw, and gets no figure (nor matplotlib's import)."""

from __future__ import annotations

import pathlib

import pandas as pd


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


PANEL_INCHES = (5.2, 3.6)
MARGIN_INCHES = {"left": 0.75, "right": 0.15, "top": 0.55, "bottom": 0.5, "between": 0.85}
"""Fixed margins around and between panels, wide enough for the axis labels and panel titles:
matplotlib's tight_layout, which measures every tick label to find them, took more than half
the time of a report's figures."""


def _grid(n: int):
    plt = _pyplot()
    cols = min(n, 3)
    rows = (n + cols - 1) // cols
    width, height = PANEL_INCHES[0] * cols, PANEL_INCHES[1] * rows + MARGIN_INCHES["top"]
    fig, axes = plt.subplots(rows, cols, figsize=(width, height), squeeze=False)
    m = MARGIN_INCHES
    fig.subplots_adjust(left=m["left"] / width, right=1 - m["right"] / width,
                        top=1 - (m["top"] + 0.3) / height, bottom=m["bottom"] / height,
                        wspace=m["between"] / (PANEL_INCHES[0] - m["between"]),
                        hspace=m["between"] / (PANEL_INCHES[1] - m["between"]))
    for ax in axes.flat[n:]:
        ax.set_visible(False)
    return fig, list(axes.flat)


def _panels(df: pd.DataFrame, value: str, title: str, ylabel: str, path: pathlib.Path,
            limit: float | None = None, x: str = "tokens") -> pathlib.Path | None:
    """One panel per (op, output), one line per implementation (its worst value per ``x``).
    The y axis is symmetric-log so that exact zeros are drawn at zero, not at a floor; ``limit``
    (the failing line) is drawn in red."""
    df = df[df[value].notna() & (pd.to_numeric(df[x], errors="coerce") > 0)]
    if df[x].nunique() < 2:
        return None
    df = df[["op", "output", "impl", x, value]]
    panels = list(df.groupby(["op", "output"], sort=True))
    fig, axes = _grid(len(panels))
    positive = pd.to_numeric(df[value], errors="coerce")
    floor = float(positive[positive > 0].min()) if (positive > 0).any() else 1e-3
    worst = df.groupby(["op", "output", "impl", x], sort=True)[value].max()
    for ax, ((op, output), sub) in zip(axes, panels):
        for impl, series in worst.loc[(op, output)].groupby(level="impl"):
            series = series.droplevel("impl")
            ax.plot(series.index, series.values, marker="o", ms=3, label=str(impl))
        if limit is not None:
            ax.axhline(limit, color="tab:red", ls="--", lw=1, label=f"fails above {limit:g}")
        ax.set_xscale("log", base=2)
        ax.set_yscale("symlog", linthresh=min(floor, limit or floor))
        top = max(float(pd.to_numeric(sub[value], errors="coerce").max()), limit or 0.0)
        ax.set_ylim(bottom=0, top=top * 3 if top > 0 else 1.0)
        ax.set_title(f"{op}: {output}", fontsize=10)
        ax.set_xlabel(x)
        ax.set_ylabel(ylabel)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=6)
    fig.suptitle(title)
    fig.savefig(path, dpi=110)
    _pyplot().close(fig)
    return path


def make_plots(df: pd.DataFrame, folder: pathlib.Path) -> list[pathlib.Path]:
    """PNG files written into ``folder``; absent data gives no figure."""
    from harness.detectors.precision_growth import GROWTH

    made = []
    shipped = df[~df["impl"].astype(str).str.startswith("fault-")]
    acc = shipped[shipped["check"] == "accuracy"]
    if "tol_used" in acc:
        made.append(_panels(acc, "tol_used", "Share of the tolerance used vs token count "
                            "(1.0 = at the limit)", "error / tolerance",
                            folder / "tolerance_used_vs_tokens.png", limit=1.0))
    growth = shipped[shipped["check"] == "precision_growth"]
    if "p99_growth" in growth:
        made.append(_panels(growth, "p99_growth", "Per-token p99 error relative to the small-T "
                            "baseline (large-token precision)", "p99 / baseline p99",
                            folder / "precision_growth.png", limit=GROWTH))
    topk = acc[acc["op"].astype(str).str.startswith("top_k") & acc["rows"].notna()] \
        if "rows" in acc else acc.iloc[0:0]
    if not topk.empty:
        rate = topk.assign(fail_rate=(topk["verdict"] != "pass").astype(float))
        made.append(_panels(rate, "fail_rate", "Top-k failing fraction vs rows per call "
                            "(batch size / concurrency)", "failing fraction",
                            folder / "topk_vs_rows.png", x="rows"))
    return [p for p in made if p is not None]
