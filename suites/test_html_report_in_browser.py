"""The HTML report is a page a person can use: loaded in a real headless browser (Chromium), it
shows the verdict, the coloured implementation x op matrix, the failure with its reproduce
command, and plots that actually load. Skips, with the way to enable it, where no Chromium is
installed (`apt-get install chromium`)."""

import pathlib
import re

import pytest

from harness.reports.summary import write_meta, write_summary
from harness.core.results import ResultLog
from suites.browser import BROWSER, NO_BROWSER, dump_dom

pytestmark = pytest.mark.machinery


def _report(folder: pathlib.Path) -> pathlib.Path:
    log = ResultLog()
    for tokens in (1, 64, 257):
        log.add(op="mhc_post", impl="triton", case=f"mhc_post-T{tokens}-H64-s0", tokens=tokens,
                hidden=64, check="accuracy", output="out", verdict="pass", max_abs=1e-3 * tokens,
                tol_used=0.2, test="/x/suites/test_mhc_accuracy.py::test_matches_reference[a]")
        log.add(op="mhc_post", impl="mybranch", case=f"mhc_post-T{tokens}-H64-s0", tokens=tokens,
                hidden=64, check="accuracy", output="out",
                verdict="fail" if tokens == 257 else "pass", max_abs=0.1 if tokens == 257 else 1e-3,
                tol_used=3.4 if tokens == 257 else 0.2, detail="7 elements beyond tolerance",
                test="/x/suites/test_mhc_accuracy.py::test_matches_reference[mhc_post-T257-H64-mybranch]")
    log.write(folder)
    write_meta(folder, profile="smoke", argv=["--impl", "triton", "--impl", "mybranch"],
               seconds=12.0, started="2026-11-23T00:00:00", cwd=str(folder))
    write_summary(folder, profile="smoke", pytest_exit=1)
    return folder / "report.html"


@pytest.mark.skipif(BROWSER is None, reason=NO_BROWSER)
def test_report_page_loads_with_matrix_failure_and_plots(tmp_path):
    dom = dump_dom(_report(tmp_path))
    assert 'id="verdict"' in dom and "Verdict: FAIL" in dom
    matrix = re.search(r'<table id="matrix">(.*?)</table>', dom, re.S)
    assert matrix, dom[:2000]
    assert re.search(r'<td class="fail"[^>]*>FAIL 3\.4 \(1 of 3\)</td>', matrix.group(1))
    assert re.search(r'<td class="pass"[^>]*>pass 0\.2</td>', matrix.group(1))
    assert "test_matches_reference[mhc_post-T257-H64-mybranch]" in dom and "--impl mybranch" in dom
    images = re.findall(r"<img [^>]*>", dom)
    assert images and all(re.search(r'data-loaded="[1-9]\d*"', img) for img in images), images
