"""Coverage is part of the verdict: what a judged implementation was judged on is counted, and a
run whose implementation skipped most of its cases (or an op) by its own declarations is not
good; declarations that mean nothing are refused at registration; a known deviation applies only
to the tests that can observe it; and the exit code follows the implementations the run judges
(``--impl``, ``--require``, the profile's default), while the matrix shows them all.

The harness runs here are ``harness run --profile smoke --op mhc_post`` on one process with a
small ``--impl-module`` (torch arithmetic only) and a ``-k`` selection: eight runs, each mostly
the harness's start-up and collection."""

import json
import math
import pathlib
import subprocess
import sys
import textwrap

import pytest

from harness.core import registry
from harness.core.verdicts import (EXIT_BAD, EXIT_GOOD, EXIT_UNTESTABLE, coverage_shortfalls,
                                     run_verdict, judged_exit_status)
from harness.subprocess_env import child_env

pytestmark = [pytest.mark.machinery, pytest.mark.host_only,
              pytest.mark.usefixtures("without_vendor_adapters")]

HEADER = """
import torch
from harness.core.registry import CostLimit, Implementation, KnownDeviation, Unsupported, add, register
from kernels.mhc.torch import mhc_post_compute, mhc_pre_compute
"""
SKIPS_ALL_BUT_T1 = HEADER + """
@register("mhc_post", "mine", unsupported=(Unsupported("only one token", lambda c: c.tokens != 1),))
def mhc_post(x, residual, post_layer_mix, comb_res_mix):
    out = mhc_post_compute(x, residual, post_layer_mix, comb_res_mix)
    return out if x.shape[0] == 1 else out * 1.5
"""
ONE_OP_WHOLLY_UNSUPPORTED = HEADER + """
@register("mhc_post", "mine")
def mhc_post(x, residual, post_layer_mix, comb_res_mix):
    return mhc_post_compute(x, residual, post_layer_mix, comb_res_mix)

@register("mhc_pre", "mine", unsupported=(Unsupported("not written yet", lambda c: True),))
def mhc_pre(*args, **kwargs):
    raise NotImplementedError
"""
COST_LIMIT_ZERO = HEADER + """
@register("mhc_post", "mine", cost_limit=CostLimit(0, "slow"))
def mhc_post(x, residual, post_layer_mix, comb_res_mix):
    return mhc_post_compute(x, residual, post_layer_mix, comb_res_mix) * 1.5
"""
BF16_ACCUMULATION = HEADER + """
@register("mhc_post", "mine", known_deviations=(KnownDeviation(
    "computes in bf16: each product and sum rounded to bf16 (measured up to 156 times the "
    "output's tolerance on the smoke cases; bound with margin)", bounds={"tol_used": 256},
    outputs=("out",)),))
def mhc_post(x, residual, post_layer_mix, comb_res_mix):
    return mhc_post_compute(x, residual, post_layer_mix, comb_res_mix, compute_dtype=torch.bfloat16)
"""
MINE_AND_A_WRONG_VENDOR = HEADER + """
@register("mhc_post", "mine")
def mhc_post(x, residual, post_layer_mix, comb_res_mix):
    return mhc_post_compute(x, residual, post_layer_mix, comb_res_mix)

def old_vendor(x, residual, post_layer_mix, comb_res_mix):
    return mhc_post_compute(x, residual, post_layer_mix, comb_res_mix) * 1.5

add(Implementation(op="mhc_post", name="old-vendor", fn=old_vendor,
                   source="harness.adapters.old_vendor"))
"""
"""``old-vendor`` stands for a vendor adapter's registration (its origin is its source module)."""


MHC_ACCURACY = str(pathlib.Path(__file__).with_name("test_mhc_accuracy.py"))


def _run(tmp_path, source, *options, select=None, ops=("mhc_post",), where=MHC_ACCURACY):
    """``harness run`` of ``source``'s implementations; ``where``: the suite file (None: every
    suite) the run collects, ``select``: its -k."""
    module = tmp_path / "impl.py"
    module.write_text(textwrap.dedent(source))
    out = tmp_path / "report"
    cmd = [sys.executable, "-m", "harness", "run", "--profile", "smoke", *(a for op in ops for a in ("--op", op)),
           "--impl-module", str(module), "--output", str(out), "--fuzz-minutes", "0", *options, "--",
           "-p", "no:xdist"] + ([where] if where else []) + (["-k", select] if select else [])
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=tmp_path,
                          env=child_env(HARNESS_ADAPTERS="none"))
    summary = (out / "summary.md").read_text() if (out / "summary.md").exists() else ""
    meta = json.loads((out / "run.json").read_text()) if (out / "run.json").exists() else {}
    return proc, summary, meta


def _explain(proc, summary=""):
    return proc.stdout[-3000:] + proc.stderr[-2000:] + summary[:3000]


def test_an_implementation_that_declares_nearly_everything_unsupported_is_not_good(tmp_path):
    """Before: 2 of 41 tests ran, exit 0, the matrix cell read "pass"."""
    select = "test_matches_reference"
    proc, summary, meta = _run(tmp_path, SKIPS_ALL_BUT_T1, "--impl", "mine", select=select)
    assert proc.returncode == EXIT_UNTESTABLE, _explain(proc, summary)
    assert "mine/mhc_post: its declarations skipped" in proc.stdout, _explain(proc)
    row = next(r for r in meta["coverage"] if r["impl"] == "mine")
    assert row["declared"] >= 10 * row["judged"] > 0, row
    assert f"{row['judged']}/{sum(v for k, v in row.items() if k not in ('impl', 'op'))} cases" \
        in summary and "## What was judged" in summary, summary
    accepted, summary, _ = _run(tmp_path, SKIPS_ALL_BUT_T1, "--impl", "mine",
                                "--accept-partial-coverage", select=select)
    assert accepted.returncode == EXIT_GOOD, _explain(accepted, summary)
    assert "short, accepted" in summary, summary


def test_an_op_wholly_unsupported_is_not_good_and_keeps_its_column(tmp_path):
    proc, summary, meta = _run(tmp_path, ONE_OP_WHOLLY_UNSUPPORTED, "--impl", "mine",
                               select="test_matches_reference", ops=("mhc_post", "mhc_pre"))
    assert proc.returncode == EXIT_UNTESTABLE, _explain(proc, summary)
    assert "mine/mhc_pre: judged on none of its" in proc.stdout, _explain(proc)
    assert "| mine | mhc_pre |" in summary, summary


def test_unselected_implementations_are_listed_not_hidden(tmp_path):
    proc, summary, _ = _run(tmp_path, MINE_AND_A_WRONG_VENDOR, "--impl", "mine",
                            select="test_matches_reference and T7")
    assert proc.returncode == EXIT_GOOD, _explain(proc, summary)
    not_run = summary.split("## Not run here", 1)[-1]
    assert "old-vendor (mhc_post): not selected: this run's --impl (mine)" in not_run, summary


def test_the_exit_code_follows_the_implementations_the_run_judges(tmp_path):
    """A developer's module is judged by default, a vendor's failure is shown, not counted;
    naming the vendor (--require here; --impl as test_cli_verdicts does) makes its failure the
    verdict."""
    select = "test_matches_reference and T7"
    mine, summary, meta = _run(tmp_path, MINE_AND_A_WRONG_VENDOR, select=select)
    assert mine.returncode == EXIT_GOOD, _explain(mine, summary)
    assert "failing test(s) of implementations this run does not judge (old-vendor" \
        in mine.stdout, _explain(mine)
    assert "| old-vendor (shown, not judged) | **FAIL**" in summary, summary
    assert meta["judged"] == sorted(set(meta["judged"]) - {"old-vendor"}) and "mine" in \
        meta["judged"], meta["judged"]
    vendor, summary, _ = _run(tmp_path, MINE_AND_A_WRONG_VENDOR, "--require", "old-vendor",
                              select=select)
    assert vendor.returncode == EXIT_BAD, _explain(vendor, summary)
    assert "| old-vendor | **FAIL**" in summary, summary


def test_a_known_deviation_applies_only_where_it_can_be_seen(tmp_path):
    """Before: six XPASS(strict) (empty batch, leading dims, batch invariance, precision growth)
    and the poisoned-output rows counted as failures: exit 1."""
    proc, summary, meta = _run(tmp_path, BF16_ACCUMULATION, "--impl", "mine", select=(
        "empty_batch or leading_dims or batch or grow or written or test_matches_reference and T7"),
        where=None)
    assert proc.returncode == EXIT_GOOD, _explain(proc, summary)
    assert "XPASS" not in proc.stdout and not meta["failed"], _explain(proc)
    assert "## Known deviations" in summary and "known deviation (" in summary, summary


@pytest.mark.parametrize("declare,message", [
    (lambda: registry.KnownDeviation("drops an index a row", bounds={"mismatch_frac": 1.0}),
     "admits any output"),
    (lambda: registry.KnownDeviation("off", bounds={"max_rel": 1.0}), "admits any output"),
    (lambda: registry.KnownDeviation("off", bounds={"max_abs": math.inf}), "finite"),
    (lambda: registry.KnownDeviation("off", bounds={"max_abs": float("nan")}), "finite"),
    (lambda: registry.KnownDeviation("off", bounds={"cosine": 0.5}), "similarity"),
    (lambda: registry.CostLimit(0, "slow"), "CostLimit(0)"),
    (lambda: registry.CostLimit(True, "slow"), "CostLimit(True)"),
    (lambda: registry.Unsupported("", lambda c: True), "needs a reason"),
], ids=["mismatch-frac-1", "max-rel-1", "inf", "nan", "cosine", "cost-limit-0", "cost-limit-bool",
        "unsupported-without-reason"])
def test_declarations_that_mean_nothing_are_refused(declare, message):
    with pytest.raises(registry.RegistryError, match=message.replace("(", r"\(").replace(")", r"\)")):
        declare()


def test_a_declaration_refused_makes_the_run_untestable_saying_what_to_do(tmp_path):
    """Before: CostLimit(0) over a 1.5x error read good (the precision-growth rows passed)."""
    proc, summary, _ = _run(tmp_path, COST_LIMIT_ZERO, "--impl", "mine",
                            select="test_matches_reference and T7")
    assert proc.returncode == EXIT_UNTESTABLE, _explain(proc, summary)
    assert "CostLimit(0)" in proc.stdout + proc.stderr and "declare the inputs it cannot " \
        "handle Unsupported" in proc.stdout + proc.stderr, _explain(proc)


def _meta(**extra):
    return {"cases_run": {"mine": 2}, "judged": ["mine"], "max_declared_skip_share": 0.25,
            "coverage": [{"impl": "mine", "op": "mhc_post", "judged": 2, "declared": 39}],
            **extra}


@pytest.mark.parametrize("meta,code,why", [
    (_meta(), EXIT_UNTESTABLE, "its declarations skipped 39 of 41 cases"),
    (_meta(accept_partial_coverage=True), EXIT_GOOD, "good"),
    (_meta(shard="1/2"), EXIT_GOOD, "good"),
    (_meta(coverage=[{"impl": "mine", "op": "mhc_pre", "judged": 0, "cost": 3}]),
     EXIT_UNTESTABLE, "judged on none of its 3 cases"),
    (_meta(coverage=[{"impl": "mine", "op": "mhc_pre", "judged": 9, "interpreter": 30,
                      "declared": 3}]), EXIT_GOOD, "good"),
    (_meta(coverage=[{"impl": "vendor", "op": "mhc_pre", "judged": 0, "declared": 3}]),
     EXIT_GOOD, "good"),
], ids=["share-exceeded", "accepted", "shard-left-to-the-merge", "op-wholly-skipped",
        "machine-skips-not-held-against-it", "not-judged"])
def test_coverage_verdict(meta, code, why):
    got, reason = run_verdict(0, meta)
    assert got == code and why in reason, reason
    assert judged_exit_status(0, meta)[0] == code


def test_failures_count_only_for_judged_implementations():
    meta = {"cases_run": {"mine": 3, "vendor": 3}, "judged": ["mine"], "failed": ["t[vendor]"],
            "failed_about": {"t[vendor]": ["vendor"]}}
    assert run_verdict(1, meta)[0] == EXIT_GOOD and judged_exit_status(1, meta)[0] == EXIT_GOOD
    about_the_harness = {**meta, "failed": ["t[vendor]", "m"], "failed_about": {
        "t[vendor]": ["vendor"], "m": []}}
    assert run_verdict(1, about_the_harness)[0] == EXIT_BAD
    assert judged_exit_status(1, about_the_harness)[0] == EXIT_BAD
    older = {"cases_run": {"vendor": 3}, "failed": ["t[vendor]"]}  # a run.json without "judged"
    assert run_verdict(1, older)[0] == EXIT_BAD and not coverage_shortfalls(older)
