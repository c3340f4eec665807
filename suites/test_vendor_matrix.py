"""The conformance matrix (summary.md, report.html, vendors.csv, ``harness vendors``) is built
from any adapter's declarations, the registry's reasons, the result rows and the skipped cases,
with nothing vendor-specific: a stand-in vendor's cells read pass, FAIL with its worst case and
the commands for it, not run here (why), not this contract (why) and not in this profile.
About 3 s (one summary written, one ``harness vendors`` call)."""

import json

import pytest

from harness import cli
from harness.adapters.base import Adapter, not_this_contract
from harness.cases.files import file_name
from harness.core.results import ResultLog
from harness.reports import vendors
from harness.reports.summary import write_meta, write_summary

pytestmark = pytest.mark.machinery

ACME = Adapter(name="acme", package="acme_kernels_absent", install_hint="",
               ops={"acme-triton": ("mhc_post", "top_k_per_row_decode"),
                    "acme-gone": ("hc_head",)},
               discover=lambda: None, bind=lambda api: {})
WORST = "mhc_post-T7-H64-s0"
FAILING_TEST = "/x/suites/test_mhc_accuracy.py::test_matches_reference[mhc_post-T7-H64-acme-triton]"
NOT_LOADED = "acme_kernels_absent is not usable here (ModuleNotFoundError: no acme)"


@pytest.fixture
def acme_only(monkeypatch):
    from harness.adapters import releases

    monkeypatch.setattr(vendors, "_adapters", lambda: [ACME])
    monkeypatch.setattr(releases, "adapters", lambda: [ACME])


def _acme_run(folder):
    log = ResultLog()
    log.add(op="mhc_post", impl="acme-triton", case="mhc_post-T1-H64-s0", tokens=1, hidden=64,
            check="accuracy", output="out", verdict="pass", tol_used=0.2, case_op="mhc_post",
            params=json.dumps({"data": "random"}))
    for tol, case in ((3.0, "mhc_post-T7-H64-s1"), (40.0, WORST)):
        log.add(op="mhc_post", impl="acme-triton", case=case, tokens=7, hidden=64,
                check="accuracy", output="out", verdict="fail", tol_used=tol, case_op="mhc_post",
                params=json.dumps({"data": "tiny"}), test=FAILING_TEST,
                detail="448 elements beyond atol=0.0001 rtol=0.0078125")
    log.write(folder)
    (folder / "cases").mkdir()
    (folder / "cases" / file_name("mhc_post", "acme-triton", WORST, "accuracy")).write_bytes(b"")
    skipped = [{"case_op": "top_k_per_row_decode", "impl": "acme-triton", "tokens": 8,
                "hidden": 0, "params": {"next_n": 2},
                "reason": "acme-triton/top_k_per_row_decode is documented not to handle this "
                          "case, so it is not judged here: "
                          + not_this_contract("takes one query row per request")}]
    write_meta(folder, profile="smoke", argv=[], seconds=1.0, started="2026-11-28T00:00:00",
               cwd=str(folder), skipped_cases=skipped)


def _row(matrix, impl, op, cell):
    rows = matrix[(matrix["impl"] == impl) & (matrix["op"] == op) & (matrix["cell"] == cell)]
    assert len(rows) == 1, (impl, op, cell, matrix[["impl", "op", "cell"]].to_string())
    return rows.iloc[0]


def test_each_cell_says_pass_fail_not_run_or_not_this_contract(tmp_path, acme_only):
    _acme_run(tmp_path)
    from harness.reports.summary import load_results, read_meta

    meta = read_meta(tmp_path)
    matrix = vendors.table(load_results(tmp_path), meta["skipped_cases"], "smoke",
                           {("hc_head", "acme-gone"): NOT_LOADED}, meta["environment"],
                           cases_dir=tmp_path / "cases")
    assert set(matrix["vendor"]) == {"acme"} and set(matrix["release"]) == {"absent"}
    assert _row(matrix, "acme-triton", "mhc_post", "random").status == vendors.PASS
    tiny = _row(matrix, "acme-triton", "mhc_post", "tiny")
    assert (tiny.status, tiny.cases, tiny.failed) == (vendors.FAIL, 2, 2)
    assert tiny.worst.startswith(WORST), "the worst case (largest share of tolerance) leads"
    assert tiny.reproduce.startswith("python3 -m pytest") and "--impl acme-triton" in tiny.reproduce
    assert tiny.replay.startswith("harness replay") and WORST in tiny.replay
    assert _row(matrix, "acme-triton", "mhc_post", "T >= 32768").status == vendors.ELSEWHERE
    assert _row(matrix, "acme-triton", "mhc_post", "outliers").status == vendors.NOT_JUDGED
    draft = _row(matrix, "acme-triton", "top_k_per_row_decode", "next_n > 1")
    assert (draft.status, draft.why) == (vendors.NOT_CONTRACT, "takes one query row per request")
    gone = _row(matrix, "acme-gone", "hc_head", "every cell")
    assert (gone.status, gone.why) == (vendors.NOT_HERE, NOT_LOADED)


def test_summary_html_and_csv_carry_the_matrix(tmp_path, acme_only):
    _acme_run(tmp_path)
    write_summary(tmp_path, profile="smoke", pytest_exit=1)
    summary = (tmp_path / "summary.md").read_text()
    section = summary[summary.index("## Vendor conformance"):]
    assert "### acme (absent)" in section
    assert "| acme-triton | mhc_post | **FAIL** | values/tiny: 2 of 2 case(s); worst " in section
    assert "replay: `harness replay" in section
    assert "| acme-triton | top_k_per_row_decode | not this contract |" in section
    html = (tmp_path / "report.html").read_text()
    assert 'id="vendors"' in html and "<b>acme</b> (absent)" in html
    assert "harness replay" in html[html.index('id="vendors"'):]
    assert "acme-triton" in (tmp_path / "vendors.csv").read_text()


def test_harness_vendors_exit_code_follows_the_matrix(tmp_path, acme_only, capsys):
    _acme_run(tmp_path / "run")
    assert cli.main(["vendors", str(tmp_path / "run")]) == 1
    assert "**FAIL**" in capsys.readouterr().out
    (tmp_path / "empty").mkdir()
    assert cli.main(["vendors", str(tmp_path / "empty")]) == 125


def test_a_test_that_raised_before_recording_a_row_fails_its_cell(tmp_path, acme_only):
    """A vendor crashing on a view (or anything raising before its comparison) leaves no result
    row; run.json's failed sweep cases still make its cell FAIL, with the exception."""
    _acme_run(tmp_path)
    from harness.reports.summary import load_results, read_meta

    crashed = {"case_op": "mhc_post", "impl": "acme-triton", "tokens": 3, "hidden": 64,
               "params": {"data": "outliers"}, "error": "RuntimeError: view size is not compatible",
               "test": "suites/test_mhc_accuracy.py::test_matches_reference[mhc_post-T3-acme-triton]"}
    meta = read_meta(tmp_path)
    matrix = vendors.table(load_results(tmp_path), meta["skipped_cases"], "smoke", {},
                           meta["environment"], cases_dir=tmp_path / "cases",
                           failed_cases=[crashed, {**crashed, "test": FAILING_TEST}])
    outliers = _row(matrix, "acme-triton", "mhc_post", "outliers")
    assert (outliers.status, outliers.failed) == (vendors.FAIL, 1)
    assert "view size is not compatible" in outliers.worst
    assert crashed["test"] in outliers.reproduce
    tiny = _row(matrix, "acme-triton", "mhc_post", "tiny")
    assert (tiny.cases, tiny.failed) == (2, 2), "a test with failing rows is not counted again"
