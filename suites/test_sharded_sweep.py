"""A sweep split over hosts loses and duplicates nothing: ``--shard I/N`` runs disjoint parts
that cover the whole profile, and ``harness report DIR...`` merges their folders into the same
results as one run (verdict, rows, JUnit), refusing folders that are not one sweep."""

import json
import pathlib
import subprocess
import sys
import xml.etree.ElementTree as ET

import pandas as pd
import pytest

from harness.pytest_plugin.shards import ShardError, parse
from harness.subprocess_env import child_env

# the harness runs here are subprocesses
pytestmark = [pytest.mark.host_only, pytest.mark.machinery,
              pytest.mark.usefixtures("without_vendor_adapters")]

ROOT = pathlib.Path(__file__).resolve().parent.parent
SELECTION = [str(ROOT / "suites" / "test_mhc_accuracy.py"), "-k", "mhc_post and torch"]
KEY = ["op", "impl", "case", "check", "output", "verdict", "max_abs"]


def _pytest(folder, *extra):
    return subprocess.run([sys.executable, "-m", "pytest", *SELECTION, "-q", "-p", "no:xdist",
                           "-p", "no:cacheprovider", "--profile", "smoke", "--report-dir", str(folder), *extra],
                          capture_output=True, text=True, timeout=900, cwd=ROOT,
                          env={**child_env(), "HARNESS_ADAPTERS": "none"})


def _rows(folder) -> pd.DataFrame:
    df = pd.concat([pd.read_csv(f) for f in sorted(pathlib.Path(folder).glob("results*.csv"))])
    return df[KEY].sort_values(KEY[:5]).reset_index(drop=True)


def _tests(folder) -> list[str]:
    root = ET.parse(pathlib.Path(folder) / "junit.xml").getroot()
    return sorted(f"{c.get('classname')}::{c.get('name')}" for c in root.iter("testcase"))


def test_three_shards_merge_to_the_results_of_one_run(tmp_path):
    whole = _pytest(tmp_path / "whole")
    assert whole.returncode == 0, whole.stdout[-2000:]
    shards = [tmp_path / f"shard{i}" for i in (1, 2, 3)]
    for i, folder in enumerate(shards, start=1):
        proc = _pytest(folder, "--shard", f"{i}/3")
        assert proc.returncode == 0, proc.stdout[-2000:]
    parts = [_tests(f) for f in shards]
    assert all(parts) and sum(map(len, parts)) == len(set().union(*parts)), "shards overlap"
    merged = tmp_path / "merged"
    proc = subprocess.run([sys.executable, "-m", "harness", "report", *map(str, shards),
                           "--output", str(merged)], capture_output=True, text=True,
                          timeout=300, cwd=ROOT, env={**child_env(), "HARNESS_ADAPTERS": "none"})
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert _tests(merged) == _tests(tmp_path / "whole") == sorted(set().union(*parts))
    pd.testing.assert_frame_equal(_rows(merged), _rows(tmp_path / "whole"))
    assert (merged / "summary.md").read_text().startswith("# Verdict: PASS")
    assert (merged / "report.html").exists()


def test_folders_of_different_profiles_are_not_merged(tmp_path):
    for name, profile in (("a", "smoke"), ("b", "nightly")):
        (tmp_path / name).mkdir()
        (tmp_path / name / "run.json").write_text(json.dumps({"profile": profile, "shard": name}))
        (tmp_path / name / "results.csv").write_text("op\nmhc_post\n")
    proc = subprocess.run([sys.executable, "-m", "harness", "report", str(tmp_path / "a"),
                           str(tmp_path / "b"), "--output", str(tmp_path / "m")],
                          capture_output=True, text=True, timeout=300, cwd=ROOT, env=child_env())
    assert proc.returncode == 125 and "different profiles" in proc.stderr, proc.stderr


@pytest.mark.parametrize("text", ["0/3", "4/3", "3", "a/b", ""])
def test_a_malformed_shard_is_a_usage_error(text):
    with pytest.raises(ShardError, match="I/N"):
        parse(text)
