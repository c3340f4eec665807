"""Every op declares the inputs it is judged on (values, sizes, metadata: harness.core.input_space),
the sweeps of each profile reach every cell that profile declares, and the report's coverage
table says per cell what was judged, skipped and why, or left to another profile."""

import json

import pandas as pd
import pytest

from harness.reports import coverage
from harness.core.cases import Case
from harness.core.input_space import PROFILES, Cell, InputSpace
from harness.core.specs import all_specs, get_spec

pytestmark = pytest.mark.machinery


def test_every_op_declares_values_and_sizes():
    for op, spec in all_specs().items():
        axes = {cell.axis for cell in spec.input_space.cells}
        assert {"values", "sizes"} <= axes, f"{op} declares no {({'values', 'sizes'} - axes)} cells"


def test_a_cell_that_selects_on_an_unknown_parameter_is_refused():
    space = InputSpace((Cell("values", "typo", "a misspelt parameter", {"dta": "zeros"}),))
    with pytest.raises(ValueError, match="dta"):
        space.check_against("top_k_per_row_prefill", get_spec("top_k_per_row_prefill").case_params)


def test_a_cell_left_out_of_a_profile_must_say_why():
    with pytest.raises(ValueError, match="elsewhere"):
        Cell("sizes", "big", "big rows", {"tokens": 9}, profiles=("nightly",))


def test_every_value_distribution_is_one_entry_of_the_input_space():
    """A new distribution is one entry: every ``data`` name a spec can draw has its own cell."""
    from kernels.mhc.spec import DISTRIBUTIONS as MHC
    from kernels.sparse_indexer.inputs import DISTRIBUTIONS as INDEXER
    from kernels.topk.spec import DISTRIBUTIONS as TOPK

    for ops, names in ((("mhc_pre", "mhc_post", "mhc_fused_post_pre", "hc_head"), MHC),
                       (("top_k_per_row_prefill", "top_k_per_row_decode"), TOPK),
                       (("fp8_quantize_k", "fp8_quantize_q", "indexer_k_quant_and_cache",
                         "fp8_mqa_logits", "fp8_paged_mqa_logits"), INDEXER)):
        for op in ops:
            spec = get_spec(op)
            for name in names:
                values = {**spec.case_params, "data": name}
                cells = [c.name for c in spec.input_space.cells_of(values) if c.axis == "values"]
                assert name in cells, f"{op}: data {name!r} has no values cell ({cells})"
                spec.check_case(Case(op, data=name))


def _rows(op, cases):
    return pd.DataFrame([{"op": op, "case_op": op, "impl": "torch", "case": cid, "tokens": t,
                          "hidden": 0, "params": json.dumps(p), "verdict": v}
                         for cid, t, p, v in cases])


def test_the_table_counts_judged_failed_skipped_left_out_and_missing_cells():
    op = "top_k_per_row_prefill"
    df = _rows(op, [("a", 33, {"top_k": 16, "context": 4096, "data": "zeros"}, "pass"),
                    ("b", 33, {"top_k": 16, "context": 4096, "data": "tiny"}, "fail"),
                    ("b", 33, {"top_k": 16, "context": 4096, "data": "tiny"}, "pass")])
    skipped = [{"case_op": op, "tokens": 2, "hidden": 0, "impl": "triton",
                "params": {"top_k": 2048, "context": 65537, "data": "near-equal"},
                "reason": "interpreter: minutes"}]
    rows = {r["cell"]: r for r in coverage.table(df, skipped, "smoke")[op]}
    assert (rows["zeros"]["status"], rows["zeros"]["judged"]) == (coverage.JUDGED, 1)
    assert (rows["tiny"]["status"], rows["tiny"]["failed"]) == (coverage.FAILED, 1)
    assert rows["near-equal"]["status"] == coverage.SKIPPED
    assert rows["near-equal"]["why"] == "interpreter: minutes"
    assert rows["k > 2048"]["status"] == coverage.ELSEWHERE and rows["k > 2048"]["why"]
    assert rows["flood"]["status"] == coverage.GAP
    text = "\n".join(coverage.markdown({op: list(rows.values())}, "smoke"))
    assert "## Input-space coverage" in text and "**NOT JUDGED**" in text
    assert f"{op}: values/flood" in text


def test_a_run_that_judged_nothing_still_gets_its_table():
    """Every case skipped (a GPU-only selection on a CPU): the cells read skipped, with why."""
    op = "mhc_post"
    skipped = [{"case_op": op, "tokens": 7, "hidden": 64, "impl": "triton", "params": {},
                "reason": "needs a GPU"}]
    rows = {r["cell"]: r for r in coverage.table(pd.DataFrame(), skipped, "smoke")[op]}
    assert rows["random"]["status"] == coverage.SKIPPED and rows["random"]["why"] == "needs a GPU"


def test_seeded_faults_do_not_count_as_coverage():
    op = "top_k_per_row_prefill"
    df = _rows(op, [("a", 33, {"data": "zeros"}, "fail")]).assign(impl="fault-x")
    rows = {r["cell"]: r for r in coverage.table(df, [], "smoke").get(op, [])}
    assert not rows or rows["zeros"]["judged"] == 0


@pytest.mark.host_only
@pytest.mark.parametrize("profile", ["smoke", "ci", "nightly"])
def test_each_profile_sweeps_every_cell_it_declares(profile, monkeypatch):
    """Collected, not run: every cell the profile declares is reached by at least one sweep case
    (one a machine would skip, a GPU case on a CPU, counts: it is in the sweep). Collected with
    the vendor adapters off: they add implementations to a sweep, never cells, so the harness's
    own implementations reaching every cell is the stronger check, without vLLM's import (8-9 s
    a collection)."""
    monkeypatch.setenv("HARNESS_ADAPTERS", "none")
    table, collected = coverage.planned(profile)
    assert collected > 100, f"the {profile} collection found only {collected} sweep tests"
    missing = coverage.gaps(table)
    assert not missing, f"{profile} declares cells its sweeps never reach: {missing}"
    assert set(table) == {op for op, spec in all_specs().items() if spec.input_space.cells}


def test_every_profile_named_by_a_cell_exists():
    for op, spec in all_specs().items():
        for cell in spec.input_space.cells:
            assert set(cell.profiles) <= set(PROFILES), (op, cell.name)
