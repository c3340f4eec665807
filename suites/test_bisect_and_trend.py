"""``harness bisect`` under ``git bisect run`` names the commit that broke a kernel, and
``harness compare`` flags a metric that got worse while still inside tolerance."""

import pathlib
import shutil
import subprocess
import sys

import pandas as pd
import pytest

from harness.subprocess_env import child_env

from harness.reports.summary import write_meta
from harness.reports.trend import compare_runs, write_trend

# the harness runs here are subprocesses
pytestmark = [pytest.mark.host_only, pytest.mark.machinery,
              pytest.mark.usefixtures("without_vendor_adapters")]
SUITES = pathlib.Path(__file__).resolve().parent

GOOD = """from harness.core.registry import register
from kernels.mhc.torch import mhc_post_compute

@register("mhc_post", "ext")
def mhc_post(x, residual, post_layer_mix, comb_res_mix):
    return mhc_post_compute(x, residual, post_layer_mix, comb_res_mix{extra})
"""


def _git(repo, *args):
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True,
                          check=True).stdout


@pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")
def test_git_bisect_run_names_the_breaking_commit(tmp_path):
    repo = tmp_path / "kernels_repo"
    repo.mkdir()
    _git(repo, "init", "-q")
    _git(repo, "config", "user.email", "ci@example.invalid")
    _git(repo, "config", "user.name", "ci")
    versions = ["", ", compute_dtype=__import__('torch').float64",
                ", compute_dtype=__import__('torch').float16", ""]
    versions[3] = versions[2]
    commits = []
    for i, extra in enumerate(versions):
        (repo / "ext.py").write_text(GOOD.format(extra=extra))
        (repo / "notes.txt").write_text(f"change {i}\n")
        _git(repo, "add", "-A")
        _git(repo, "commit", "-qm", f"change {i}")
        commits.append(_git(repo, "rev-parse", "HEAD").strip())
    _git(repo, "bisect", "start", commits[-1], commits[0])
    cmd = [sys.executable, "-m", "harness", "bisect", "--op", "mhc_post", "--impl", "ext",
           "--impl-module", "ext.py", "--", str(SUITES / "test_mhc_accuracy.py"),
           "-k", "test_matches_reference and T33",
           "-p", "no:xdist"]
    out = subprocess.run(["git", "-C", str(repo), "bisect", "run", *cmd], capture_output=True,
                         text=True, timeout=900, env=child_env())
    assert f"{commits[2]} is the first bad commit" in out.stdout, out.stdout[-4000:] + out.stderr[-2000:]


def _frame(max_abs, verdict="pass"):
    return pd.DataFrame([{"op": "mhc_post", "impl": "triton", "case": "c", "check": "accuracy",
                          "output": "out", "verdict": verdict, "max_abs": max_abs}])


def test_compare_flags_worse_metric_inside_tolerance(tmp_path):
    old, new = tmp_path / "old", tmp_path / "new"
    old.mkdir()
    new.mkdir()
    _frame(1e-3).to_csv(old / "results.csv", index=False)
    _frame(4e-3).to_csv(new / "results.csv", index=False)
    assert bool(compare_runs(_frame(1e-3), _frame(4e-3))["regressed"].iloc[0])
    assert not bool(compare_runs(_frame(1e-3), _frame(1.2e-3))["regressed"].iloc[0])
    path, worse = write_trend(old, new)
    assert worse == 1 and "mhc_post" in path.read_text()


def test_compare_without_results_is_an_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="results"):
        write_trend(tmp_path, tmp_path)


def test_compare_prints_the_matrix_with_arrows_and_the_first_run_that_moved(tmp_path):
    """Four nightly runs: the error grew 4x in the second and stayed; `harness compare` of the
    first and the last names the second, and the matrix shows the arrow."""
    runs = []
    for i, error in enumerate((1e-3, 4e-3, 4e-3, 4e-3)):
        run = tmp_path / f"2026-11-0{i + 1}-nightly"
        run.mkdir()
        _frame(error).to_csv(run / "results.csv", index=False)
        write_meta(run, profile="nightly", started=f"2026-11-0{i + 1}T00:00:00")
        runs.append(run)
    proc = subprocess.run([sys.executable, "-m", "harness", "compare", str(runs[0]), str(runs[-1])],
                          capture_output=True, text=True, env=child_env(), timeout=300)
    assert proc.returncode == 1, proc.stderr
    assert "▲ 4x" in proc.stdout, proc.stdout
    assert runs[1].name in proc.stdout.split("first_moved_in")[-1], proc.stdout


def test_summary_says_where_the_time_went(tmp_path):
    """durations.csv is written test by test (a run stopped by a CI limit keeps it), and the
    summary lists the slowest tests with their waits for the GPU and failures' first lines."""
    from types import SimpleNamespace

    from harness.pytest_plugin.durations import DurationLog
    from harness.reports.durations import where_time_went

    log = DurationLog(tmp_path)
    for nodeid, seconds, props, failed in (("t.py::fast", 0.1, [], False),
                                           ("t.py::slow", 9.0, [("heavy", True),
                                                                ("gpu_lock_wait_s", 2.0)], True)):
        for when in ("setup", "call", "teardown"):
            bad = failed and when == "call"
            log.pytest_runtest_logreport(SimpleNamespace(
                nodeid=nodeid, when=when, duration=seconds if when == "call" else 0.0,
                failed=bad, skipped=False, outcome="failed" if bad else "passed",
                user_properties=props, longrepr=SimpleNamespace(
                    reprcrash=SimpleNamespace(message="CUDA out of memory"))))
    rows = pd.read_csv(tmp_path / "durations.csv")
    assert list(rows["nodeid"]) == ["t.py::fast", "t.py::slow"]
    assert rows.set_index("nodeid").at["t.py::slow", "message"] == "CUDA out of memory"
    lines = where_time_went(tmp_path)
    assert "1 heavy tests (the GPU to themselves) took 9 s; tests waited 2 s" in lines[2], lines
    assert lines[4] == "- 9.0 s, waited 2.0 s: `t.py::slow`", lines
