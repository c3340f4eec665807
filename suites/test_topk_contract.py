"""The top-k call contract: edge-case rows, tie handling, declared NaN handling, and clear errors
from the shipped kernels on invalid arguments."""

import pytest
import torch

from harness.evaluate import evaluate
from harness.core.ops import TOPK_OPS
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


@pytest.mark.sweep(ops=["top_k_per_row_prefill"], tokens=[8], top_k=[K])
def test_edge_case_rows(target, record):
    spec = target.spec
    inputs = spec.make_inputs(target.case)
    inputs.update(_edge_inputs(target.case.device))
    inputs["stride0"], inputs["stride1"] = inputs["logits"].stride()
    ev = evaluate(spec, target.impl, target.case, inputs=inputs, check="edge_rows")
    record(ev.rows)
    assert ev.passed, ev.failures()


@pytest.mark.sweep(ops=["top_k_per_row_decode"], tokens=[6], top_k=[64], context=[40], next_n=[2])
def test_top_k_larger_than_columns(target, record):
    ev = evaluate(target.spec, target.impl, target.case, check="k_beyond_columns")
    record(ev.rows)
    assert ev.passed, ev.failures()


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


@pytest.mark.implementation("torch")
def test_nan_in_window_is_rejected_by_the_reference():
    logits = torch.randn(2, 16)
    logits[1, 3] = float("nan")
    idx = torch.empty(2, 4, dtype=torch.int32)
    with pytest.raises(ContractError, match="NaN"):
        topk_ref.top_k_per_row_prefill(logits, torch.zeros(2, dtype=torch.int32),
                                       torch.full((2,), 16, dtype=torch.int32), idx, 2, 16, 1, 4)


def _bad_calls(inputs):
    yield "top_k", {**inputs, "top_k": 0}
    yield "int32", {**inputs, "indices": inputs["indices"].long()}
    yield "columns", {**inputs, "indices": inputs["indices"][:, :2]}
    yield "stride", {**inputs, "stride0": inputs["stride0"] + 1}
    if "row_ends" in inputs:
        ends = inputs["row_ends"].clone()
        ends[0] = inputs["row_starts"][0] - 1
        yield "row_ends < row_starts", {**inputs, "row_ends": ends}
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
    for word, bad in _bad_calls(inputs):
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
