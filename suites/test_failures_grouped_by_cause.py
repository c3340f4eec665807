"""One bug gives one group: failures are grouped by (implementation, op, output, kind of
failure) in summary.md and report.html, worst group first (NaN before any finite error), each
with its count, token range, worst case and the commands for it, the individual failures folded
under it; JUnit carries each failing test's group as a ``failure_group`` property
(test_cli_verdicts)."""

import re

import pytest

from harness.core.results import ResultLog
from harness.reports.summary import write_meta, write_summary
from harness.core.verdicts import failure_kind

pytestmark = pytest.mark.machinery


def _broken_einsum_run(folder):
    """30 cases of one wrong mhc_post (beyond tolerance at every T), 2 NaN cases of its hc_head,
    one passing reference row."""
    log = ResultLog()
    for i, tokens in enumerate([1, 2, 7, 33, 64, 257] * 5):
        log.add(op="mhc_post", impl="mine", case=f"mhc_post-T{tokens}-H64-s{i}", tokens=tokens,
                hidden=64, check="accuracy", output="out", verdict="fail", tol_used=40.0 + i,
                detail=f"{tokens * 10} elements beyond atol=0.0001 rtol=0.0078125",
                test=f"/x/suites/test_mhc_accuracy.py::test_matches_reference[mhc_post-T{tokens}-H64-mine]")
    for tokens in (7, 33):
        log.add(op="hc_head", impl="mine", case=f"hc_head-T{tokens}-H64-s0", tokens=tokens,
                hidden=64, check="accuracy", output="out", verdict="fail",
                detail="out: 12 NaN; 12 non-finite values differ from the reference",
                test="/x/suites/test_mhc_accuracy.py::test_matches_reference[hc_head-T7-H64-mine]")
    log.add(op="mhc_post", impl="torch", case="mhc_post-T7-H64-s0", tokens=7, hidden=64,
            check="accuracy", output="out", verdict="pass", tol_used=0.3, detail="")
    log.write(folder)
    write_meta(folder, profile="smoke", argv=["--impl-module", "mine.py"], seconds=3.0,
               started="2026-11-26T00:00:00", cwd=str(folder))
    write_summary(folder, profile="smoke", pytest_exit=1)


def test_one_wrong_einsum_is_one_group_with_its_range_and_worst_case(tmp_path):
    _broken_einsum_run(tmp_path)
    summary = (tmp_path / "summary.md").read_text()
    assert "## Failures (32 in 2 group(s) by cause; worst first)" in summary, summary
    groups = re.findall(r"^- \*\*(.+?)\*\*, output `(.+?)`, (.+?): (\d+) case\(s\)"
                        r"(, T \d+(?:\.\.\d+)?)?", summary, re.M)
    assert groups == [("hc_head / mine", "out", "NaN", "2", ", T 7..33"),
                      ("mhc_post / mine", "out", "beyond tolerance", "30", ", T 1..257")]
    assert "Worst: `mhc_post-T257-H64-s29` (accuracy)" in summary, "the worst case leads"
    assert summary.count("  - also ") == 5 + 1 and "24 more in results*.csv" in summary
    assert "reproduce: `python3 -m pytest" in summary and f"--impl-module {tmp_path}/mine.py" in summary
    html = (tmp_path / "report.html").read_text()
    assert html.count('<details class="group"') == 2
    assert html.count('<details class="failure">') == 32


def test_failure_kinds_name_what_went_wrong():
    assert failure_kind({"check": "accuracy", "output": "*", "detail": "got float32"}) == \
        "exception or contract violation"
    assert failure_kind({"check": "determinism", "output": "out",
                         "detail": "nondeterministic: run 2 differs"}) == "nondeterministic"
    assert failure_kind({"check": "accuracy", "output": "logits",
                         "detail": "-inf pattern differs at 3 cells"}) == "wrong -inf mask"


def test_one_bug_seen_by_several_checks_is_one_group(tmp_path):
    """The same wrong mhc_post fails the accuracy suite and the dispatch-threshold detector: one
    group, naming both checks."""
    from harness.reports.tables import failure_groups

    log = ResultLog()
    for check in ("accuracy", "dispatch_thresholds"):
        log.add(op="mhc_post", impl="mine", case=f"mhc_post-T7-H64-{check}", tokens=7, hidden=64,
                check=check, output="out", verdict="fail", tol_used=9.0,
                detail="9 elements beyond atol=0.0001")
    groups = failure_groups(log.frame(), "smoke", [])
    assert len(groups) == 1 and groups[0]["checks"] == ["accuracy", "dispatch_thresholds"]
