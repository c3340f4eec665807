"""Figures of a run (matplotlib, Agg): the large-token precision picture and the batch picture."""

from __future__ import annotations

import pathlib

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402


def _grid(n: int):
    cols = min(n, 3)
    rows = (n + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(5.2 * cols, 3.6 * rows), squeeze=False)
    for ax in axes.flat[n:]:
        ax.set_visible(False)
    return fig, list(axes.flat)


def _lines(df: pd.DataFrame, value: str, title: str, ylabel: str, path: pathlib.Path,
           x: str = "tokens") -> pathlib.Path | None:
    df = df[df[value].notna() & (df[x] > 0)]
    if df.empty:
        return None
    ops = sorted(df["op"].unique())
    fig, axes = _grid(len(ops))
    for ax, op in zip(axes, ops):
        sub = df[df["op"] == op]
        for (impl, output), g in sub.groupby(["impl", "output"]):
            series = g.groupby(x)[value].max().sort_index()
            ax.plot(series.index, series.clip(lower=1e-12).values, marker="o", ms=3,
                    label=f"{impl}: {output}")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_title(op, fontsize=10)
        ax.set_xlabel(x)
        ax.set_ylabel(ylabel)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=6)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def make_plots(df: pd.DataFrame, folder: pathlib.Path) -> list[pathlib.Path]:
    """PNG files written into ``folder``; absent data gives no figure."""
    made = []
    shipped = df[~df["impl"].astype(str).str.startswith("fault-")]
    acc = shipped[shipped["check"] == "accuracy"]
    made.append(_lines(acc, "max_abs", "Max abs error vs token count (float64 reference)",
                       "max abs error", folder / "error_vs_tokens.png"))
    growth = shipped[shipped["check"] == "precision_growth"]
    if "p99" in growth:
        made.append(_lines(growth, "p99", "Per-token p99 relative error vs token count "
                           "(large-token precision)", "p99 per-token error",
                           folder / "precision_growth.png"))
    topk = acc[acc["op"].astype(str).str.startswith("top_k") & acc["rows"].notna()] \
        if "rows" in acc else acc.iloc[0:0]
    if not topk.empty:
        rate = topk.assign(fail_rate=(topk["verdict"] != "pass").astype(float) + 1e-6)
        made.append(_lines(rate, "fail_rate", "Top-k failing fraction vs rows per call "
                           "(batch size / concurrency)", "failing fraction (+1e-6)",
                           folder / "topk_vs_rows.png"))
    return [p for p in made if p is not None]


def e2e_accuracy(levels: list[dict], golden: dict | None, path: pathlib.Path) -> pathlib.Path:
    """Accuracy per concurrency level (95% error bars) against the golden's 95% band."""
    from harness.e2e.golden import METRICS

    fig, axes = plt.subplots(1, len(METRICS), figsize=(6 * len(METRICS), 4), squeeze=False)
    ok = [lv for lv in levels if not lv.get("error")]
    for ax, metric in zip(axes[0], METRICS):
        xs = [str(lv["level"]) for lv in ok]
        ys = [lv["metrics"][metric]["acc"] for lv in ok]
        err = [1.96 * (lv["metrics"][metric]["stderr"] or 0.0) for lv in ok]
        colors = ["tab:red" if lv["verdict"] == "regression" else "tab:blue" for lv in ok]
        if golden and metric in golden["metrics"]:
            g = golden["metrics"][metric]
            se = g.get("stderr") or (g["acc"] * (1 - g["acc"]) / g["n"]) ** 0.5
            ax.axhspan(g["acc"] - 1.96 * se, g["acc"] + 1.96 * se, color="tab:green", alpha=0.2,
                       label=f"golden {golden['name']} (95%)")
            ax.axhline(g["acc"], color="tab:green")
        if xs:
            ax.errorbar(xs, ys, yerr=err, fmt="none", ecolor="gray", capsize=4)
            ax.scatter(xs, ys, c=colors, zorder=3, label="run (red: regression)")
        for lv in levels:
            if lv.get("error"):
                ax.annotate(f"c{lv['level']}: error", xy=(0.02, 0.02), xycoords="axes fraction",
                            color="tab:red")
        ax.set(title=f"GSM8K {metric}", xlabel="client concurrency", ylabel="accuracy")
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
