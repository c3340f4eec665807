"""The E2E figure (matplotlib, Agg): accuracy per client concurrency level against the golden's band."""

from __future__ import annotations

import pathlib

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from harness.e2e.golden import METRICS  # noqa: E402


def e2e_accuracy(levels: list[dict], golden: dict | None, path: pathlib.Path) -> pathlib.Path:
    """Accuracy per concurrency level (95% error bars) against the golden's 95% band."""
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
