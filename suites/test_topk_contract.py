"""The top-k call contract: edge-case rows, tie handling, NaN never selected, and clear errors
from the shipped kernels on invalid arguments."""

import pytest
import torch

from harness.evaluate import evaluate
from kernels.topk.ops import TOPK_OPS
from harness.core.cases import Case
from kernels.topk.compare import compare_topk
from kernels.topk import torch as topk_ref
from kernels.topk.validate import ContractError

OPS = TOPK_OPS
SHIPPED = ("torch", "triton")
K = 8


def _edge_inputs(device):
    """Rows of length 0, 1, K-1, K, K+1, the full width, an all -inf row and a tie row."""
    n = 40
    starts = torch.tensor([3, 0, 5, 7, 2, 0, 10, 1], dtype=torch.int32)
    lengths = torch.tensor([0, 1, K - 1, K, K + 1, n, 20, 30], dtype=torch.int32)
    logits = torch.randn(8, n, generator=torch.Generator().manual_seed(0))
    logits[6] = float("-inf")
    logits[7] = torch.where(torch.arange(n) % 3 == 0, 1.0, -1.0)
    return {"logits": logits.to(device), "row_starts": starts.to(device),
            "row_ends": (starts + lengths).to(device)}


def _evaluate_on_rows(target, rows, check, record):
    """The target's implementation on the prefill rows ``rows(device)`` builds."""
    inputs = target.spec.make_inputs(target.case)
    inputs.update(rows(target.case.device))
    inputs["stride0"], inputs["stride1"] = inputs["logits"].stride()
    ev = evaluate(target.spec, target.impl, target.case, inputs=inputs, check=check)
    record(ev.rows)
    return ev, inputs


@pytest.mark.sweep(ops=["top_k_per_row_prefill"], tokens=[8], top_k=[K])
def test_edge_case_rows(target, record):
    ev, _ = _evaluate_on_rows(target, _edge_inputs, "edge_rows", record)
    ev.assert_passed()


@pytest.mark.sweep(ops=["top_k_per_row_decode"], tokens=[6], top_k=[64], context=[40], next_n=[2])
def test_top_k_larger_than_columns(target, record):
    ev = evaluate(target.spec, target.impl, target.case, check="k_beyond_columns")
    record(ev.rows)
    ev.assert_passed()


def test_different_tie_order_passes_and_wrong_value_fails():
    torch.manual_seed(0)
    logits = torch.where(torch.rand(4, 50) < 0.5, 1.0, 0.0)
    starts = torch.zeros(4, dtype=torch.int32)
    ends = torch.full((4,), 50, dtype=torch.int32)
    ref = torch.empty(4, K, dtype=torch.int32)
    topk_ref.select_into(logits, starts, ends, ref, K)
    ones = [torch.nonzero(logits[r] == 1.0).flatten() for r in range(4)]
    other = torch.stack([o[-K:].flip(0) for o in ones]).int()
    row = compare_topk(other, ref, logits, starts, ends, K)
    assert row["passed"] and row["tie_resolved_rows"] > 0
    wrong = other.clone()
    wrong[0, 0] = int(torch.nonzero(logits[0] == 0.0)[0])
    assert not compare_topk(wrong, ref, logits, starts, ends, K)["passed"]


def _nan_rows(device):
    """NaN of each bit pattern among finite values, fewer non-NaN values than K, a row of NaN
    alone, NaN beside -inf and +inf, a short row, and a tie row with NaN."""
    n = 40
    starts = torch.tensor([0, 3, 5, 2, 7, 0, 1, 4], dtype=torch.int32)
    lengths = torch.tensor([20, 10, 12, 12, 6, 30, 16, 10], dtype=torch.int32)
    logits = torch.randn(8, n, generator=torch.Generator().manual_seed(1))
    bits = logits.view(torch.int32)
    nan = [0x7FC00000, -0x400000, 0x7F800001, -1]
    for r, cols in {0: [1, 4, 9], 1: [3, 4, 5, 6, 7], 2: range(5, 17), 3: range(2, 8),
                    4: [7, 8], 5: [0, 10, 20, 29], 6: range(1, 17, 2), 7: [4, 5, 6]}.items():
        for i, c in enumerate(cols):
            bits[r, c] = nan[i % len(nan)]
    logits[3, 8:14] = float("-inf")
    logits[5, 1:29] = torch.where(torch.tensor([c in (10, 20) for c in range(1, 29)]),
                                  logits[5, 1:29], 1.0)
    logits[7, 7:9] = float("inf")
    return {"logits": logits.to(device), "row_starts": starts.to(device),
            "row_ends": (starts + lengths).to(device)}


@pytest.mark.sweep(ops=["top_k_per_row_prefill"], tokens=[8], top_k=[K])
def test_nan_is_never_selected_and_short_rows_pad_with_minus_one(target, record):
    """../shared/spec/ops.md (NaN, updated 2026-11-25): NaN ranks below -inf and is never
    selected; a window with fewer than min(top_k, len) other values pads with -1."""
    ev, inputs = _evaluate_on_rows(target, _nan_rows, "nan_rows", record)
    ev.assert_passed()
    ref = torch.empty(8, K, dtype=torch.int32)
    topk_ref.select_into(inputs["logits"].cpu(), inputs["row_starts"].cpu(),
                         inputs["row_ends"].cpu(), ref, K)
    assert (ref[2] == -1).all() and (ref[1] >= 0).sum() == 5 and (ref[3] >= 0).sum() == 6


def test_a_selected_nan_fails_the_comparison():
    logits = torch.tensor([[float("nan"), 1.0, 2.0, 3.0]])
    starts, ends = torch.zeros(1, dtype=torch.int32), torch.full((1,), 4, dtype=torch.int32)
    ref = torch.empty(1, 4, dtype=torch.int32)
    topk_ref.select_into(logits, starts, ends, ref, 4)
    assert sorted(ref[0].tolist()) == [-1, 1, 2, 3]
    picked_nan = torch.tensor([[3, 2, 1, 0]], dtype=torch.int32)
    row = compare_topk(picked_nan, ref, logits, starts, ends, 4)
    assert not row["passed"] and row["nan_selected"] == 1 and "NaN" in row["detail"]


def _bad_calls(inputs):
    yield "top_k", {**inputs, "top_k": 0}
    yield "int32", {**inputs, "indices": inputs["indices"].long()}
    yield "columns", {**inputs, "indices": inputs["indices"][:, :2]}
    yield "stride", {**inputs, "stride0": inputs["stride0"] + 1}
    if "row_ends" in inputs:
        ends = inputs["row_ends"].clone()
        ends[0] = inputs["row_starts"][0] - 1
        yield "row_ends < row_starts", {**inputs, "row_ends": ends}
        past = inputs["row_ends"].clone()
        past[0] = inputs["logits"].shape[1] + 1
        yield "beyond", {**inputs, "row_ends": past}
    else:
        yield "next_n", {**inputs, "next_n": 0}
        too_long = inputs["seq_lens"].clone()
        too_long[-1] = inputs["logits"].shape[1] + 1
        yield "needs", {**inputs, "seq_lens": too_long}


@pytest.mark.sweep(tokens=[4], top_k=[K], context=[50], seqs=[2], next_n=[2])
def test_invalid_arguments_raise_clear_errors(target):
    if target.impl.name not in SHIPPED:
        pytest.skip("error messages are part of the shipped kernels' contract only")
    inputs = target.spec.make_inputs(target.case)
    target.spec.call(target.impl.fn, inputs)  # a good call first: its checks are kept per signature
    for word, bad in _bad_calls(inputs):
        for _ in range(2):  # and a failed check is never kept
            with pytest.raises(ContractError, match=word):
                target.spec.call(target.impl.fn, bad)


@pytest.mark.implementation("triton")
def test_triton_passes_on_tie_heavy_data():
    """Values sharing their top 22 bits: the Triton kernel takes equal values in column order,
    whatever torch.topk picks; the tie-aware comparison accepts either choice."""
    from harness.core.registry import records

    impl = records(TOPK_OPS[1]).get("triton")
    if impl is None or not impl.available:
        pytest.skip("triton top-k not available here")
    from harness.core.specs import get_spec

    spec = get_spec(TOPK_OPS[1])
    case = Case(TOPK_OPS[1], tokens=8, device="cuda" if torch.cuda.is_available() else "cpu",
                top_k=64, context=400, next_n=2, data="ties")
    ev = evaluate(spec, impl, case)
    assert ev.passed, ev.failures()
