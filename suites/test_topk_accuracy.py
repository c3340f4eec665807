"""Top-k per row against the reference, tie-aware, across row counts, window lengths, top_k,
batch mixes and data shapes (every run also checks the guard band around ``indices``)."""

import dataclasses

import pytest

from harness.detectors import config_invariance
from harness.evaluate import evaluate
from kernels.topk.ops import TOPK_OPS

OPS = TOPK_OPS

PREFILL_ROWS = {"smoke": [1, 3, 64], "ci": [1, 64, 2050], "default": [1, 3, 64, 2050, 8192]}
PREFILL_SEQS = {"smoke": [1, 5], "ci": [1, 7], "default": [1, 7, 64]}
DECODE_BATCH = {"smoke": [1, 2, 7], "ci": [1, 7, 256], "default": [1, 2, 7, 64, 256, 2048]}
NEXT_N = [1, 2, 4]
TOP_K = {"smoke": [16, 512], "ci": [512, 2048], "default": [512, 1024, 2048, 3000]}
CONTEXT = {"smoke": [600], "ci": [8192, 131072], "default": [8192, 131072]}
SHAPE_ROWS = {"smoke": [64], "default": [64, 2050]}
SHAPE_K = {"smoke": [16], "default": [2048]}


def _check(target, case, record):
    ev = evaluate(target.spec, target.impl, case, runs=target.runs(case))
    record(ev.rows)
    ev.assert_passed()


def _decode_case(target):
    rows = target.case.param("batch") * target.case.param("next_n")
    return dataclasses.replace(target.case, tokens=rows)


@pytest.mark.sweep(ops=["top_k_per_row_prefill"], tokens=PREFILL_ROWS, top_k=TOP_K, context=CONTEXT,
                   seqs=PREFILL_SEQS)
def test_prefill_matches_reference(target, record):
    _check(target, target.case, record)


@pytest.mark.sweep(ops=["top_k_per_row_prefill"], tokens=SHAPE_ROWS, top_k=SHAPE_K, context=[4096],
                   seqs=[5], data=["random", "ties"], clean=[True, False], strided=[False, True])
def test_prefill_data_shapes(target, record):
    """Ties (many equal values), uncleaned tails (large values past each window) and strided
    logits: the shapes that expose tie handling, reads past the end and stride mistakes."""
    _check(target, target.case, record)


CAPACITY_ROWS = {"smoke": [33], "default": [33, 512]}
CAPACITY_CONTEXT = [4096, 8192, 16385, 65537]
"""On both sides of 4096 and 16384 columns; on a CPU the torch paths and user modules run the
long rows (the Triton interpreter stops at INTERPRETER_MAX_ELEMENTS, with its reason)."""


@pytest.mark.sweep(ops=["top_k_per_row_prefill"], tokens=CAPACITY_ROWS, top_k=[2048],
                   context=CAPACITY_CONTEXT, seqs=[1], data=["near-equal", "flood"])
def test_prefill_dense_near_ties_and_tie_floods(target, record):
    """Rows that overflow any on-chip stash of the threshold bin: thousands of distinct values
    sharing the k-th value's leading bits (vLLM #51782: 33 rows of 16385 values in [1.0,
    1.245)), and > 1024 values equal to the k-th at k = 2048 (SGLang #30645)."""
    _check(target, target.case, record)


@pytest.mark.sweep(ops=["top_k_per_row_decode"], batch=[1], next_n=[1], top_k=[2048],
                   context=CAPACITY_CONTEXT, data=["near-equal", "flood"])
def test_decode_dense_near_ties_and_tie_floods(target, record):
    _check(target, _decode_case(target), record)


@pytest.mark.sweep(ops=["top_k_per_row_prefill"], tokens=[33], top_k=SHAPE_K, context=[4096],
                   seqs=[5], data=["negative-ties", "near-constant"])
def test_prefill_radix_digit_patterns(target, record):
    """Negative ties (order keys are the complemented bits) and a near-constant row (the same
    radix digit in nearly every element), through the sweep of every implementation."""
    _check(target, target.case, record)


@pytest.mark.sweep(ops=["top_k_per_row_decode"], batch=[7], next_n=[2], top_k=SHAPE_K,
                   context=[4096], data=["negative-ties", "near-constant"])
def test_decode_radix_digit_patterns(target, record):
    _check(target, _decode_case(target), record)


@pytest.mark.sweep(ops=["top_k_per_row_prefill"], tokens=[33], top_k=SHAPE_K, context=[4096],
                   seqs=[5], data=["zeros", "tiny"])
def test_prefill_zero_and_subnormal_rows(target, record):
    """All-zero rows (+0.0 and -0.0: every value ties, and zero is a value, not an empty slot) and
    subnormal magnitudes (a kernel that flushes them to zero sees ties where there are none)."""
    _check(target, target.case, record)


@pytest.mark.sweep(ops=["top_k_per_row_decode"], batch=[7], next_n=[2], top_k=SHAPE_K,
                   context=[4096], data=["zeros", "tiny"])
def test_decode_zero_and_subnormal_rows(target, record):
    _check(target, _decode_case(target), record)


@pytest.mark.sweep(ops=["top_k_per_row_decode"], batch=[7], next_n=[1, 4], top_k=SHAPE_K,
                   context=[4096], seq_lens_2d=[True], padded_requests=[0, 2])
def test_decode_two_dimensional_seq_lens(target, record):
    """seq_lens given as [batch, next_n] (each draft row's own length), with and without padded
    draft requests whose rows have length 0."""
    _check(target, _decode_case(target), record)


@pytest.mark.sweep(ops=["top_k_per_row_decode"], batch=[3], next_n=[1, 2], top_k=[2048],
                   context=[2048], full_rows=[True], clean=[False])
def test_decode_rows_as_long_as_the_buffer(target, record):
    """Every request's length is the logits' whole width, top_k that width: the last draft
    row's window ends at the last column and every column is selected (a kernel that assumes a
    padding column past every row drops it)."""
    _check(target, _decode_case(target), record)


@pytest.mark.sweep(ops=["top_k_per_row_decode"], batch=[7], next_n=[2, 4], top_k=SHAPE_K,
                   context=[4096], padded_requests=[3])
def test_decode_padded_draft_rows_select_nothing(target, record):
    """Padding requests of a draft-extend graph keep seq_len 1 < next_n: rows whose causal end
    is <= 0 must be all -1 (SGLang #30378 read that end as unsigned)."""
    _check(target, _decode_case(target), record)


@pytest.mark.sweep(ops=["top_k_per_row_prefill"], tokens=SHAPE_ROWS, top_k=SHAPE_K, context=[4096],
                   seqs=[5], data=["nan", "ties-nan"], clean=[False], strided=[True])
def test_prefill_nan_and_inf_inside_windows(target, record):
    """NaN of every bit pattern and +-inf inside the windows, a row with fewer non-NaN values
    than top_k (../shared/spec/ops.md: NaN is never selected; the rest of the row pads with
    -1), on random and tie-heavy rows (vLLM #49896)."""
    _check(target, target.case, record)


@pytest.mark.sweep(ops=["top_k_per_row_decode"], batch=[7], next_n=[4], top_k=SHAPE_K,
                   context=[4096], data=["nan", "ties-nan"], clean=[False], strided=[True])
def test_decode_nan_and_inf_inside_windows(target, record):
    _check(target, _decode_case(target), record)


@pytest.mark.sweep(ops=["top_k_per_row_decode"], batch=DECODE_BATCH, next_n=NEXT_N, top_k=TOP_K,
                   context=CONTEXT)
def test_decode_matches_reference(target, record):
    _check(target, _decode_case(target), record)


@pytest.mark.sweep(ops=["top_k_per_row_decode"], batch=[7], next_n=[1, 4], top_k=SHAPE_K,
                   context=[4096], data=["random", "ties"], clean=[True, False], strided=[False, True])
def test_decode_data_shapes(target, record):
    _check(target, _decode_case(target), record)


@pytest.mark.sweep(ops=["top_k_per_row_decode"], batch={"smoke": [1], "default": [1, 64]},
                   next_n=[2], top_k=[2048], context=[300_000])
def test_decode_near_300k_columns(target, record):
    """The longest rows upstream serves; on a CPU torch paths and user modules run them."""
    _check(target, _decode_case(target), record)


@pytest.mark.gpu
@pytest.mark.sweep(ops=["top_k_per_row_decode"], batch={"nightly": [2048], "full": [2048],
                                                        "default": []},
                   next_n=[4], top_k=[2048], context=[300_000])
def test_decode_past_2_31_logits(target, record):
    """2048 x 4 rows of 300000 columns: 2.46e9 logits (9.8 GB), the largest decode batch the
    contract's sizes allow; a kernel whose row offsets are 32-bit reads the wrong rows past
    2^31 elements. Nightly only (a GPU with the memory to itself)."""
    _check(target, _decode_case(target), record)


SELECT_PATHS = {
    "registers, small tile": {},
    "registers": {"small_tile": 16},
    "registers, on the row (buffer overflow)": {"candidate_budget": 1},
    "long-row stages, one program a row": {"small_tile": 16, "reg_tile": 32, "finish_tile": 64},
    "long-row stages over slices of the row": {"small_tile": 16, "reg_tile": 32,
                                               "finish_tile": 64, "slice_min": 512},
    "long-row stages on the row (buffer overflow)": {"candidate_budget": 1, "finish_tile": 256,
                                                     "reg_tile": 32, "slice_min": 1024},
}
"""Launch plans (kernels.topk.triton.LaunchPlan) that route the finishing select of the sizes
below through each of its paths (with the default plan only rows of more than 4096 candidates
reach the last three)."""


@pytest.mark.parametrize("data", ["random", "ties", "near-constant"])
@pytest.mark.implementation("triton")
@pytest.mark.parametrize("path", SELECT_PATHS)
@pytest.mark.parametrize("coarse_bits, radix", [(6, 5), (8, 4)])
@pytest.mark.parametrize("finish", ["in the filter launch", "own launch"])
def test_triton_finishing_paths_match_reference(path, data, coarse_bits, radix, finish):
    ev = _triton_prefill_under_plan(data, **SELECT_PATHS[path], coarse_bits=coarse_bits,
                                    radix=radix, split_finish=finish == "own launch")
    assert ev.passed, f"{path}, {data}: {ev.failures()}"


@pytest.mark.parametrize("data", ["nan", "ties-nan"])
@pytest.mark.implementation("triton")
@pytest.mark.parametrize("path", SELECT_PATHS)
def test_triton_finishing_paths_never_select_nan(path, data):
    """NaN's order key is the lowest; every finishing path writes a chosen NaN as -1 (the digit
    and the launch split do not touch that, so one plan of each suffices)."""
    ev = _triton_prefill_under_plan(data, **SELECT_PATHS[path])
    assert ev.passed, f"{path}, {data}: {ev.failures()}"


@pytest.mark.parametrize("data", ["ties", "negative-ties"])
@pytest.mark.implementation("triton")
@pytest.mark.parametrize("row_bits", [True, False], ids=["range in histogram pass",
                                                          "range in filter pass"])
def test_triton_tie_rows_find_their_key_range_in_either_pass(data, row_bits):
    """Rows held whole by their threshold bin, read by the long-row finish: the bin's key range
    comes from the histogram pass's bit folds (``row_bits``) or from the filter's own pass, on
    positive and negative values (whose order keys are their complemented bits)."""
    ev = _triton_prefill_under_plan(data, **SELECT_PATHS["long-row stages on the row (buffer overflow)"],
                                    row_bits=row_bits)
    assert ev.passed, f"{data}, row_bits={row_bits}: {ev.failures()}"


def _triton_prefill_under_plan(data: str, **plan_fields):
    """The Triton prefill op on 6 rows of up to 3000 columns (top_k 64) under a launch plan
    (kernels.topk.triton.LaunchPlan with ``plan_fields``), judged against the reference."""
    import torch

    from harness.core.registry import records
    from harness.core.cases import Case
    from harness.core.specs import get_spec
    from kernels.topk.triton import LaunchPlan

    impl = records(OPS[0]).get("triton")
    if impl is None or not impl.available:
        pytest.skip(f"triton top-k not available here: {getattr(impl, 'reason', 'unregistered')}")
    case = Case(OPS[0], tokens=6, device="cuda" if torch.cuda.is_available() else "cpu", top_k=64,
                context=3000, seqs=2, data=data)
    return evaluate(get_spec(OPS[0]), impl, case, plan=LaunchPlan(**plan_fields))


@pytest.mark.sweep(ops=["top_k_per_row_prefill"], tokens=[6], top_k=[64], context=[3000], seqs=[2])
def test_prefill_launch_plans_do_not_change_the_result(target, record):
    """The kernels' claim that a row's top-k depends only on the row, whatever the launch plan
    (every plan of the implementation's ``plan`` knob, kernels.topk.triton.PLANS)."""
    _check_knobs(target, target.case, record)


@pytest.mark.sweep(ops=["top_k_per_row_decode"], batch=[3], next_n=[2], top_k=[64], context=[3000])
def test_decode_launch_plans_do_not_change_the_result(target, record):
    _check_knobs(target, _decode_case(target), record)


def _check_knobs(target, case, record):
    if not target.impl.knobs:
        pytest.skip(f"{target.impl.name} declares no launch knobs for {target.op}")
    finding = config_invariance.check(target.spec, target.impl, case)
    record(finding.rows)
    assert finding.passed, finding.explain()
