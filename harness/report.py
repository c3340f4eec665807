"""A run folder's reports: the Markdown summary (what ran, what failed worst first, what could not
run and why, the environment) and the HTML page with plots. ``harness report DIR`` rebuilds both
from the saved results."""

from __future__ import annotations

import glob
import html
import importlib.metadata
import json
import pathlib
import subprocess

import pandas as pd

from harness import device, report_tables
from harness.registry import unavailable
from harness.results import KNOWN_DEVIATION
from harness.verdict import run_verdict


def environment() -> dict[str, str]:
    info = device.describe()
    for pkg in ("vllm", "aiter", "lm-eval", "liger-kernel"):
        try:
            info[pkg] = importlib.metadata.version(pkg)
        except importlib.metadata.PackageNotFoundError:
            info[pkg] = "absent"
    if info["vllm"] != "absent":
        info["vllm_commit"] = _vllm_commit()
    repo = pathlib.Path(__file__).resolve().parent.parent
    info["git_commit"] = _run(["git", "-C", str(repo), "rev-parse", "--short", "HEAD"]) or "unknown"
    if device.has_gpu():
        info["driver"] = _run(["nvidia-smi", "--query-gpu=driver_version",
                               "--format=csv,noheader"]) or "unknown"
    return info


def _vllm_commit() -> str:
    """The commit vLLM was built from (its ``_version.py``), read without importing vLLM."""
    import importlib.util
    import re

    spec = importlib.util.find_spec("vllm")
    if spec is None or not spec.submodule_search_locations:
        return "unknown"
    path = pathlib.Path(list(spec.submodule_search_locations)[0]) / "_version.py"
    found = re.search(r"__commit_id__\s*=\s*commit_id\s*=\s*['\"]([^'\"]+)",
                      path.read_text()) if path.exists() else None
    return found.group(1) if found else "unknown"


def _run(cmd: list[str]) -> str:
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=20).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def write_meta(folder: pathlib.Path, **meta) -> None:
    (folder / "run.json").write_text(json.dumps({**meta, "environment": environment()}, indent=1))


def read_meta(folder: pathlib.Path) -> dict:
    path = folder / "run.json"
    return json.loads(path.read_text()) if path.exists() else {}


def load_results(folder: pathlib.Path) -> pd.DataFrame:
    files = sorted(glob.glob(str(folder / "results*.csv")))
    if not files:
        return pd.DataFrame()
    return pd.concat([pd.read_csv(f) for f in files], ignore_index=True)


def write_summary(folder: pathlib.Path, profile: str, pytest_exit: int) -> pathlib.Path:
    df = load_results(folder)
    code, why = run_verdict(int(pytest_exit), read_meta(folder))
    verdict = {0: "PASS", 1: "FAIL"}.get(code, "COULD NOT TEST")
    lines = [f"# Verdict: {verdict} (profile `{profile}`)", "", why, ""]
    modules, wanted = _run_option(folder, "--impl-module"), set(_run_option(folder, "--impl"))
    missing = {key: reason for key, reason in unavailable().items()
               if not wanted or key[1] in wanted}
    if not df.empty:
        lines += report_tables.self_check(df)
        lines += report_tables.failures(df, profile, modules)
    shown = df[df["impl"].isin(wanted)] if wanted and not df.empty else df
    lines += report_tables.matrix(shown, missing) if not shown.empty or missing else []
    if not df.empty:
        lines += _known_deviations(df)
    lines += _saved_cases(folder)
    if missing:
        grouped: dict[tuple[str, str], list[str]] = {}
        for (op, name), why in sorted(missing.items()):
            grouped.setdefault((name, why), []).append(op)
        lines += ["## Not run here", ""] + [f"- {name} ({', '.join(ops)}): {why}"
                                           for (name, why), ops in grouped.items()] + [""]
    env = read_meta(folder).get("environment") or environment()
    lines += ["## Environment", ""] + [f"- {k}: {v}" for k, v in env.items()]
    trend = folder / "trend.md"
    if trend.exists():
        lines += ["", trend.read_text()]
    path = folder / "summary.md"
    path.write_text("\n".join(lines) + "\n")
    write_html(folder, df, "\n".join(lines))
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


def write_html(folder: pathlib.Path, df: pd.DataFrame, summary_md: str) -> pathlib.Path:
    from harness.plots import make_plots

    pngs = make_plots(df, folder) if not df.empty else []
    parts = ["<!doctype html><meta charset='utf-8'><title>harness report</title>",
             "<style>body{font-family:sans-serif;max-width:1400px;margin:auto}"
             "pre{background:#f6f6f6;padding:8px;overflow:auto}"
             "table{border-collapse:collapse;font-size:12px}td,th{border:1px solid #ccc;"
             "padding:2px 6px}</style>",
             "<h1>Harness report</h1>"]
    parts += [f"<h2>{html.escape(p.stem.replace('_', ' '))}</h2><img src='{p.name}' "
              f"style='max-width:100%'>" for p in pngs]
    if not df.empty:
        failed = df[(df["verdict"] == "fail") & ~report_tables.seeded(df)]
        if not failed.empty:
            parts += ["<h2>Failures</h2>", failed[["op", "impl", "case", "check", "output",
                                                   "detail"]].head(200).to_html(index=False)]
    parts += ["<h2>Summary</h2><pre>", html.escape(summary_md), "</pre>"]
    path = folder / "report.html"
    path.write_text("\n".join(parts))
    return path
