"""Kernel speed over time, from the benchmarks' ``--json`` files (``benchmarks/*.py --json F``).

Benchmarks time; they do not judge, so nothing here sets a verdict or an exit code. A run is
compared only with earlier runs of the same benchmark on the same device (an H200 figure says
nothing about an H100 one): the newest run against the one before it, row by row (op, shape,
implementation), and every row's share of its limit (bandwidth or roofline, measured in the
same run) is plotted over time.
"""

from __future__ import annotations

import datetime
import json
import pathlib
import re

import pandas as pd

NOISE = 0.10
"""A row moved when its median time changed by more than this share. The same benchmark run
twice on one H100 (bench_topk, 2026-11-25) moved by up to 3.5%."""

KEY = ["op", "shape", "impl"]
FIGURES = ["ms", "figure", "unit", "% of limit", "% of same-size copy"]
WRITE_ONE = "write one with `python benchmarks/bench_mhc.py --json FILE` (or bench_topk, bench_indexer)"


class SpeedFileError(ValueError):
    """A benchmark file that cannot be read as one: the message names the file and the fault."""


def benchmark_files(paths) -> dict[pathlib.Path, object]:
    """The benchmark JSON files among ``paths``, parsed: files as given, and in folders every
    ``*.json`` holding an object with a ``benchmark`` key (a report folder's run.json is passed
    over)."""
    found = {}
    for path in map(pathlib.Path, paths):
        if path.is_dir():
            docs = {p: _parse(p) for p in sorted(path.rglob("*.json"))}
            found.update({p: d for p, d in docs.items() if isinstance(d, dict) and "benchmark" in d})
        elif path.exists():
            found[path] = _parse(path)
        else:
            raise SpeedFileError(f"{path}: no such file or folder")
    if not found:
        raise SpeedFileError(f"no benchmark JSON in {', '.join(map(str, paths))}; {WRITE_ONE}")
    return found


def _parse(path: pathlib.Path):
    try:
        return json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise SpeedFileError(f"{path}: not readable as JSON ({exc}); a run stopped part-way "
                             f"leaves a truncated file: rerun it, or {WRITE_ONE}") from exc


def load(paths) -> pd.DataFrame:
    """Every row of every benchmark file, with its run's ``benchmark``, ``time``, ``device`` and
    ``run``: the file's place in time order (two files written in the same second, an A/B of
    two builds, stay two runs)."""
    df = pd.concat([_rows(path, doc) for path, doc in benchmark_files(paths).items()],
                   ignore_index=True)
    order = df[["time", "file"]].drop_duplicates().sort_values(["time", "file"])
    df = df.reindex(columns=list(dict.fromkeys([*df.columns, *FIGURES])))
    return df.assign(run=df["file"].map({f: i for i, f in enumerate(order["file"])}))


def _rows(path: pathlib.Path, doc) -> pd.DataFrame:
    def fault(what: str) -> SpeedFileError:
        return SpeedFileError(f"{path}: {what}; this is not a benchmark file as "
                              f"benchmarks/common.py writes it: {WRITE_ONE}")

    if not isinstance(doc, dict):
        raise fault("the top level is not an object")
    for key, kind in (("benchmark", str), ("time", str), ("device", str), ("rows", list)):
        if not isinstance(doc.get(key), kind):
            raise fault(f"'{key}' is missing or not a {kind.__name__}")
    try:
        time = pd.Timestamp(datetime.datetime.fromisoformat(doc["time"]))
    except ValueError as exc:
        raise fault(f"'time' {doc['time']!r} is not an ISO date") from exc
    if not doc["rows"]:
        raise fault("it has no rows")
    for i, row in enumerate(doc["rows"]):
        if not isinstance(row, dict) or not all(isinstance(row.get(k), str) for k in KEY):
            raise fault(f"row {i} lacks one of {', '.join(KEY)}")
        if row.get("note") is None and not (_positive(row.get("ms")) and isinstance(row.get("unit"), str)
                                            and _number(row.get("figure"))):
            raise fault(f"row {i} ({row['op']} {row['shape']} {row['impl']}) has no positive "
                        "'ms' with a numeric 'figure' and its 'unit', nor a 'note' saying why")
    df = pd.DataFrame(doc["rows"])
    df["benchmark"], df["time"], df["device"] = doc["benchmark"], time, doc["device"]
    df["file"] = str(path)
    return df


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value == value


def _positive(value) -> bool:
    return _number(value) and value > 0


def changes(df: pd.DataFrame) -> pd.DataFrame:
    """Per device and benchmark, the newest run against the run before it: one row per
    (op, shape, impl) timed in both, with ``before``, ``now`` (ms), ``ratio`` (now / before)
    and ``moved`` ("slower", "faster" or "")."""
    timed = df[df["ms"].notna()] if "ms" in df else df.iloc[0:0]
    parts = []
    for (device, bench), runs in timed.groupby(["device", "benchmark"]):
        order = sorted(runs["run"].unique())
        if len(order) < 2:
            continue
        old, new = (runs[runs["run"] == r].drop_duplicates(KEY) for r in order[-2:])
        both = old[KEY + ["ms"]].rename(columns={"ms": "before"}).merge(
            new[KEY + ["ms", "% of limit"]].rename(columns={"ms": "now",
                                                         "% of limit": "% of limit now"}), on=KEY)
        both.insert(0, "benchmark", bench)
        both.insert(0, "device", device)
        both["since"] = old["time"].iloc[0]
        parts.append(both)
    if not parts:
        return pd.DataFrame(columns=["device", "benchmark", *KEY, "before", "now",
                                     "% of limit now", "since", "ratio", "moved"])
    out = pd.concat(parts, ignore_index=True)
    out["ratio"] = out["now"] / out["before"]
    out["moved"] = ""
    out.loc[out["ratio"] > 1 + NOISE, "moved"] = "slower"
    out.loc[out["ratio"] < 1 / (1 + NOISE), "moved"] = "faster"
    return out


def newest(df: pd.DataFrame) -> pd.DataFrame:
    """The rows of each (device, benchmark)'s newest run."""
    last = df.groupby(["device", "benchmark"])["run"].transform("max")
    return df[df["run"] == last]


def headline(moves: pd.DataFrame, df: pd.DataFrame) -> str:
    runs = df["run"].unique()
    if moves.empty:
        return (f"Kernel speed: {len(runs)} run(s), none with an earlier run of the same benchmark "
                "on the same device to compare with")
    counts = moves["moved"].value_counts()
    compared = ", ".join(sorted(moves["benchmark"].unique()))
    return (f"Kernel speed: {counts.get('slower', 0)} row(s) slower, {counts.get('faster', 0)} "
            f"faster, {int((moves['moved'] == '').sum())} within {NOISE:.0%} of the previous run "
            f"on the same device ({compared})")


def _moved_table(moves: pd.DataFrame, kind: str) -> pd.DataFrame:
    rows = moves[moves["moved"] == kind].copy()
    rows = rows.sort_values("ratio", ascending=kind == "faster")
    rows["change"] = rows["ratio"].map(lambda r: f"{r:.2f}x the time")
    rows["reproduce"] = "python benchmarks/" + rows["benchmark"] + ".py"
    rows = rows.rename(columns={"before": "ms before", "now": "ms now"})
    return rows[["device", "benchmark", *KEY, "ms before", "ms now", "change", "% of limit now",
                 "since", "reproduce"]]


def _figures(df: pd.DataFrame) -> pd.DataFrame:
    extra = [c for c in df.columns if c.startswith("x vs ")]
    cols = KEY + [c for c in FIGURES + ["timing"] + extra + ["note"] if c in df.columns]
    return df[cols].dropna(axis=1, how="all").astype(object).where(lambda d: d.notna(), None)


def summary(df: pd.DataFrame, moves: pd.DataFrame) -> list[str]:
    """``speed.md``: the headline, the rows that moved (slowest first), the newest figures."""
    lines = [f"# {headline(moves, df)}", "",
             "Benchmarks time, they do not judge: no exit code depends on these figures. A row "
             f"moved when its median time changed by more than {NOISE:.0%}; runs on other "
             "devices are never compared.", ""]
    for kind in ("slower", "faster"):
        rows = _moved_table(moves, kind)
        if not rows.empty:
            lines += [f"## {kind.capitalize()} than the previous run", "",
                      rows.to_markdown(index=False, floatfmt=".4g", missingval=""), ""]
    for (device, bench), rows in newest(df).groupby(["device", "benchmark"]):
        lines += [f"## {bench} on {device}, {rows['time'].iloc[0].isoformat()}", "",
                  _figures(rows).to_markdown(index=False, floatfmt=".4g", missingval=""), ""]
    return lines


def plot(df: pd.DataFrame, folder: pathlib.Path) -> list[pathlib.Path]:
    """One PNG per (benchmark, device): a panel per (op, shape), a line per implementation, its
    median time (log axis) run by run (evenly spaced, labelled with the run's time), so the
    shipped kernel and its peers move on one picture whatever bounds them (top-k is far from
    the copy bandwidth by design)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter

    plain = FuncFormatter(lambda v, _: f"{v:.3g}")
    paths = []
    for (bench, device), rows in df[df["ms"].notna()].groupby(["benchmark", "device"]):
        runs = rows.drop_duplicates("run").sort_values("run")
        labels = [t.strftime("%Y-%m-%d %H:%M") for t in runs["time"]]
        rows = rows.assign(x=rows["run"].map({r: i for i, r in enumerate(runs["run"])}))
        panels = sorted(rows.groupby(["op", "shape"]).groups)
        cols = min(len(panels), 4)
        height = (len(panels) + cols - 1) // cols
        fig, axes = plt.subplots(height, cols, squeeze=False, figsize=(4.2 * cols, 3.0 * height))
        for ax in axes.flat[len(panels):]:
            ax.set_visible(False)
        for ax, (op, shape) in zip(axes.flat, panels):
            panel = rows[(rows["op"] == op) & (rows["shape"] == shape)]
            for impl, line in panel.groupby("impl"):
                line = line.sort_values("x")
                ax.plot(line["x"], line["ms"], marker="o", ms=3, label=str(impl))
            ax.set_yscale("log")
            ax.yaxis.set_major_formatter(plain)
            ax.yaxis.set_minor_formatter(plain)
            ax.tick_params(axis="y", which="both", labelsize=6)
            ax.set_xticks(range(len(runs)), labels)
            ax.set_xlim(-0.5, len(runs) - 0.5)
            ax.set_title(f"{op}\n{shape}", fontsize=8)
            ax.set_ylabel("ms per call", fontsize=8)
            ax.tick_params(axis="x", labelrotation=30, labelsize=6)
            ax.grid(True, which="both", alpha=0.3)
            ax.legend(fontsize=6)
        fig.suptitle(f"{bench} on {device}: median GPU time per call, run by run (lower is faster)")
        fig.tight_layout()
        path = folder / f"speed_{_slug(bench)}_{_slug(device)}.png"
        fig.savefig(path, dpi=100)
        plt.close(fig)
        paths.append(path)
    return paths


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "-", text).strip("-")


def write(df: pd.DataFrame, folder: pathlib.Path) -> pathlib.Path:
    """``speed.md``, ``speed.html``, ``speed.csv`` (every row of every run) and the plots."""
    import jinja2

    folder.mkdir(parents=True, exist_ok=True)
    moves = changes(df)
    path = folder / "speed.md"
    path.write_text("\n".join(summary(df, moves)) + "\n")
    df.sort_values(["device", "benchmark", "run"]).to_csv(folder / "speed.csv", index=False)
    plots = plot(df, folder)
    env = jinja2.Environment(loader=jinja2.PackageLoader("harness.reports", "templates"),
                             autoescape=True, undefined=jinja2.StrictUndefined)
    html = env.get_template("speed.html").render(
        headline=headline(moves, df), noise=f"{NOISE:.0%}",
        moved=[(kind, _moved_table(moves, kind).to_html(index=False, float_format="{:.4g}".format))
               for kind in ("slower", "faster") if (moves["moved"] == kind).any()],
        plots=[p.name for p in plots],
        newest=[(f"{bench} on {device}, {rows['time'].iloc[0].isoformat()}",
                 _figures(rows).to_html(index=False, float_format="{:.4g}".format, na_rep=""))
                for (device, bench), rows in newest(df).groupby(["device", "benchmark"])])
    (folder / "speed.html").write_text(html)
    return path
