"""The indexer call contract: edge batches (no queries, a query seeing one key, padded decode
requests with no context), clear errors from the shipped kernels on invalid arguments, and
correct alternatives (another head-sum order, paged logits via gather + prefill) passing."""

import pytest
import torch

from kernels.runtime import deferred
from harness.evaluate import evaluate
from kernels.sparse_indexer.ops import INDEXER_OPS
from harness.core.registry import Implementation, records
from harness.core.cases import Case
from harness.core.errors import ContractError
from harness.core.specs import get_spec
from kernels.sparse_indexer import torch as ref
from kernels.sparse_indexer.inputs import BLOCK_SIZE, HEAD_DIM

OPS = INDEXER_OPS
SHIPPED = ("torch", "triton")


def _shipped(op):
    return [records(op)[n].fn for n in SHIPPED if records(op)[n].available]


def _mqa_inputs(device="cpu"):
    case = Case("fp8_mqa_logits", tokens=5, device=device, heads=4, seqs=2, context=30)
    return get_spec("fp8_mqa_logits").make_inputs(case)


def _paged_inputs(device="cpu"):
    case = Case("fp8_paged_mqa_logits", tokens=4, device=device, heads=4, next_n=2, context=100)
    return get_spec("fp8_paged_mqa_logits").make_inputs(case)


@pytest.mark.parametrize("op,tokens,params", [
    ("fp8_mqa_logits", 0, (("heads", 4),)),
    ("fp8_mqa_logits", 1, (("heads", 4), ("context", 0))),
    ("fp8_quantize_k", 0, ()),
    ("indexer_k_quant_and_cache", 0, ()),
], ids=["no-queries", "one-key", "quantize-empty", "cache-empty"])
@pytest.mark.parametrize("impl", SHIPPED)
def test_edge_batches(op, tokens, params, impl, device, record):
    ev = evaluate(get_spec(op), records(op)[impl], Case(op, tokens=tokens, device=device, params=params),
                  check="edge")
    record(ev.rows)
    assert ev.passed, ev.failures()


@pytest.mark.parametrize("impl", SHIPPED)
def test_padded_requests_with_no_context_are_all_minus_inf(impl, device):
    inputs = _paged_inputs(device)
    inputs["context_lens"][1] = 0
    out = get_spec("fp8_paged_mqa_logits").call(records("fp8_paged_mqa_logits")[impl].fn, inputs)
    assert torch.isneginf(out[2:4]).all(), "rows of a request with context 0 must be -inf"
    assert torch.isfinite(out[0, :int(inputs["context_lens"][0]) - 1]).all()


BAD_MQA = {
    "q not fp8": (lambda a: a.update(q=a["q"].float()), "q must be float8_e4m3fn"),
    "kv not a pair": (lambda a: a.update(kv=a["kv"][0]), "kv must be the pair"),
    "k_scale wrong length": (lambda a: a.update(kv=(a["kv"][0], a["kv"][1][:-1])), "k_scale must be"),
    "weights wrong shape": (lambda a: a.update(weights=a["weights"][:, :2]), "weights must be"),
    "window reversed": (lambda a: a["cu_seqlen_ke"].__setitem__(0, -1), "windows must satisfy"),
    "window past keys": (lambda a: a["cu_seqlen_ke"].__setitem__(0, 10_000), "windows must satisfy"),
    "ks int64": (lambda a: a.update(cu_seqlen_ks=a["cu_seqlen_ks"].long()), "cu_seqlen_ks must be int32"),
}


@pytest.mark.implementation("torch", "triton")
@pytest.mark.parametrize("case", BAD_MQA, ids=list(BAD_MQA))
def test_mqa_rejects_bad_arguments(case, device):
    mutate, message = BAD_MQA[case]
    for fn in _shipped("fp8_mqa_logits"):
        get_spec("fp8_mqa_logits").call(fn, _mqa_inputs(device))  # checks are kept per signature
        args = _mqa_inputs(device)
        mutate(args)
        for _ in range(2):  # and a failed one is never kept
            with pytest.raises(ContractError, match=message):
                get_spec("fp8_mqa_logits").call(fn, args)


BAD_PAGED = {
    "cache not uint8": (lambda a: a.update(kv_cache=a["kv_cache"].float()), "kv_cache must be a contiguous uint8"),
    "cache wrong bytes per block": (lambda a: a.update(kv_cache=a["kv_cache"][..., :HEAD_DIM].contiguous()),
                                    "bytes per block"),
    "block table too narrow": (lambda a: a.update(block_tables=a["block_tables"][:, :0]), "need"),
    "context past max_model_len": (lambda a: a.update(max_model_len=8), "max_model_len"),
    "weights not per draft row": (lambda a: a.update(weights=a["weights"][:2]), "weights must be"),
}


@pytest.mark.implementation("torch", "triton")
@pytest.mark.parametrize("case", BAD_PAGED, ids=list(BAD_PAGED))
def test_paged_rejects_bad_arguments(case, device):
    mutate, message = BAD_PAGED[case]
    for fn in _shipped("fp8_paged_mqa_logits"):
        get_spec("fp8_paged_mqa_logits").call(fn, _paged_inputs(device))  # checks are kept per signature
        args = _paged_inputs(device)
        mutate(args)
        for _ in range(2):  # and a failed one is never kept
            with pytest.raises(ContractError, match=message):
                get_spec("fp8_paged_mqa_logits").call(fn, args)


@pytest.mark.implementation("torch", "triton")
def test_quantisation_rejects_bad_arguments(device):
    """On the device the harness runs on (on a GPU the Triton kernels flag bad slots there and
    the check is read by ``deferred.raise_pending``)."""
    k = torch.randn(4, HEAD_DIM, device=device).bfloat16()
    cache = torch.zeros(2, BLOCK_SIZE, 1, HEAD_DIM + 4, dtype=torch.uint8, device=device)
    for fn in _shipped("fp8_quantize_k"):
        with pytest.raises(ContractError, match="k must be bf16"):
            fn(k.float())
        with pytest.raises(ContractError, match="scale_fmt"):
            fn(k, "e4m3")
    for fn in _shipped("indexer_k_quant_and_cache"):
        with pytest.raises(ContractError, match="slot_mapping entries"):
            fn(k, cache, torch.tensor([0, 1, 2, 2 * BLOCK_SIZE], device=device), HEAD_DIM, None)
            deferred.raise_pending()
        with pytest.raises(ContractError, match="quant_block_size"):
            fn(k, cache, torch.arange(4, device=device), 64, None)
    for fn in _shipped("fp8_quantize_q"):
        with pytest.raises(ContractError, match="weights must be float32"):
            fn(k.view(4, 1, HEAD_DIM), torch.ones(4, 2, device=device), 0.1)



@pytest.mark.implementation("triton")
@pytest.mark.parametrize("op", OPS)
def test_shipped_kernels_refuse_an_undeclared_head_dim(op, device):
    """head_dim 48 (not a power of two) is outside what the shipped kernels declare
    (triton.HEAD_DIMS): a ContractError naming head_dim, never a silent wrong answer, and the
    registration says so (its sweep cases skip with the reason)."""
    from kernels.sparse_indexer import triton as shipped

    impl = records(op)["triton"]
    if not impl.available:
        pytest.skip(impl.reason)
    case = Case(op, tokens=4, device=device, head_dim=48,
                **({"heads": 4} if "heads" in get_spec(op).case_params else {}))
    assert impl.unsupported_for(case), f"triton/{op} does not declare head_dim 48 unsupported"
    with pytest.raises(ContractError, match="head_dim"):
        get_spec(op).call(impl.fn, get_spec(op).make_inputs(case))
    assert 48 not in shipped.HEAD_DIMS


@pytest.mark.implementation("triton")
def test_shipped_paged_kernel_refuses_a_block_size_it_cannot_tile(device):
    """Blocks of more than 64 slots are loaded whole (tl.arange): 96 is refused, naming
    block_size; 1 to 64 slots are gathered whatever the size (the sweeps judge them)."""
    impl = records("fp8_paged_mqa_logits")["triton"]
    if not impl.available:
        pytest.skip(impl.reason)
    case = Case("fp8_paged_mqa_logits", tokens=2, device=device, heads=4, context=100,
                block_size=96)
    with pytest.raises(ContractError, match="block_size"):
        get_spec("fp8_paged_mqa_logits").call(impl.fn, get_spec("fp8_paged_mqa_logits").make_inputs(case))


def test_launch_plan_rejects_an_unknown_key_block_width():
    """A key block width the prefill kernels do not have would launch the wrong grid: the plan
    refuses it when it is made."""
    from kernels.sparse_indexer.triton import LaunchPlan

    with pytest.raises(ValueError, match="key_halves must be None"):
        LaunchPlan(key_halves=4)

def _reverse_head_order(q, kv, weights, cu_seqlen_ks, cu_seqlen_ke):
    """Correct, but sums the heads last-to-first in float64: only rounding differs."""
    k, scale = kv
    out = torch.zeros(q.shape[0], k.shape[0], dtype=torch.float64)
    for h in reversed(range(q.shape[1])):
        s = (q[:, h].double() @ k.double().t()) * scale.double()
        out += s.relu() * weights[:, h, None].double()
    cols = torch.arange(k.shape[0])
    vis = (cols[None] >= cu_seqlen_ks[:, None]) & (cols[None] < cu_seqlen_ke[:, None])
    return out.float().masked_fill(~vis, float("-inf"))


def _paged_via_gather(q, kv_cache, weights, context_lens, block_tables, max_model_len):
    """Correct alternative: gather each request's keys through its block table, then prefill."""
    b, next_n, heads, d = q.shape
    out = torch.full((b * next_n, max_model_len), float("-inf"))
    pos = ref.paged_positions(context_lens, next_n)
    for i in range(b):
        length = int(context_lens[i])
        if length <= 0:
            continue
        k, s = ref.gather_paged_keys(kv_cache, block_tables, i, length, d, BLOCK_SIZE)
        rows = slice(i * next_n, (i + 1) * next_n)
        ke = (pos[rows] + 1).clamp(0, length).int()
        out[rows, :length] = ref.fp8_mqa_logits(q[i], (k, s), weights[rows], torch.zeros_like(ke), ke)
    return out


@pytest.mark.parametrize("op,fn,inputs", [
    ("fp8_mqa_logits", _reverse_head_order, _mqa_inputs),
    ("fp8_paged_mqa_logits", _paged_via_gather, _paged_inputs),
], ids=["reverse-head-order", "paged-via-gather"])
def test_correct_alternatives_pass(op, fn, inputs):
    impl = Implementation(op=op, name="alternative", fn=fn)
    args = inputs()
    ev = evaluate(get_spec(op), impl, Case(op), inputs=args)
    assert ev.passed, ev.failures()


def _writer_with_scale_off_by(ulps):
    """The reference K-cache writer, with the first written slot's fp32 scale moved by ``ulps``."""
    def write(k, kv_cache, slot_mapping, quant_block_size, scale_fmt):
        ref.write_cache(k, kv_cache, slot_mapping, scale_fmt)
        slot = int(slot_mapping[slot_mapping >= 0][0])
        _, scales = ref.cache_views(kv_cache, HEAD_DIM, BLOCK_SIZE)
        word = scales.view(torch.int32)[slot // BLOCK_SIZE, slot % BLOCK_SIZE:slot % BLOCK_SIZE + 1]
        word += ulps
    return write


@pytest.mark.parametrize("ulps,declared,passes", [
    (1, {}, False), (1, {"fp32_division": "approximate"}, True),
    (3, {"fp32_division": "approximate"}, False)])
def test_approximate_division_admits_only_its_bound(ulps, declared, passes):
    """A K-cache writer declaring approximate fp32 division (vLLM's Triton writer on NVIDIA
    GPUs) may put a scale 2 ulp off, not more; undeclared, the cache must be bit-exact. The
    detail names where the first difference is."""
    case = Case("indexer_k_quant_and_cache", tokens=40, scale_fmt=None)
    impl = Implementation("indexer_k_quant_and_cache", "scale-off", _writer_with_scale_off_by(ulps),
                          declared=declared)
    ev = evaluate(get_spec("indexer_k_quant_and_cache"), impl, case)
    assert ev.passed == passes, ev.failures()
    detail = ev.rows[0]["detail"]
    assert "1 scales (first: block" in detail and "value bytes" not in detail, detail


@pytest.mark.machinery
@pytest.mark.parametrize("op,tokens,params", [
    ("fp8_paged_mqa_logits", 8, (("heads", 4), ("next_n", 2), ("batch", 4), ("context", 200),
                                 ("sparse_rows", True))),
    ("fp8_mqa_logits", 9, (("heads", 4), ("context", 100), ("sparse_rows", True))),
], ids=["paged", "prefill"])
def test_a_sparse_truth_judges_live_rows_and_every_idle_row(op, tokens, params, monkeypatch):
    """Logits past SPARSE_TRUTH_FROM elements are judged on a truth of their live rows (the
    2^31-element cells): lowered here to judge small cases the same way. The reference passes;
    logits lost past an element offset (the 32-bit wrap's symptom) and one idle row written
    fail."""
    from kernels.sparse_indexer import spec as indexer_spec

    monkeypatch.setattr(indexer_spec, "SPARSE_TRUTH_FROM", 0)
    spec, impl = get_spec(op), records(op)["torch"]
    case = Case(op, tokens=tokens, params=params)
    inputs = spec.make_inputs(case)
    truth = spec.reference(inputs)
    live = truth["live_rows"]
    assert 0 < live.numel() < tokens and truth["logits"].shape[0] == live.numel()
    assert evaluate(spec, impl, case, inputs=inputs, ref=truth).passed

    def lose_tail(*args):
        out = impl.fn(*args)
        out.view(-1)[out.numel() - out.shape[1] // 2:] = 0.0
        return out

    def idle_row_written(*args):
        out = impl.fn(*args)
        idle = sorted(set(range(out.shape[0])) - set(live.tolist()))[0]
        out[idle, 0] = 0.0
        return out

    for name, fn in (("lose-tail", lose_tail), ("idle-row", idle_row_written)):
        bad = Implementation(op=op, name=name, fn=fn)
        ev = evaluate(spec, bad, case, inputs=inputs, ref=truth)
        assert not ev.passed, f"{name} passed a sparse truth"


def _leaves_outside_unwritten(changes_inside: bool):
    """The reference paged logits in a buffer whose cells outside the windows hold whatever it
    held (new values each call, as a ``new_empty`` buffer would); ``changes_inside``: the second
    call also moves one visible logit."""
    calls = []

    def paged(q, kv_cache, weights, context_lens, block_tables, max_model_len):
        out = _paged_via_gather(q, kv_cache, weights, context_lens, block_tables, max_model_len)
        calls.append(1)
        garbage = torch.randn(out.shape, generator=torch.Generator().manual_seed(len(calls)))
        out = torch.where(torch.isneginf(out), garbage, out)
        if changes_inside and len(calls) > 1:
            visible = (~torch.isinf(_paged_via_gather(q, kv_cache, weights, context_lens,
                                                      block_tables, max_model_len))).nonzero()
            out[tuple(visible[0])] += 1.0
        return out
    return paged


@pytest.mark.parametrize("changes_inside", [False, True], ids=["outside-only", "inside-too"])
def test_cells_declared_unwritten_are_not_compared_between_runs(changes_inside):
    """An implementation declaring ``outside_window: unwritten`` (SGLang's TileLang and vLLM's
    paged logits allocate with ``new_empty``) may return other bytes there on every call: its
    determinism is judged inside the windows only, where a changed logit still fails."""
    impl = Implementation("fp8_paged_mqa_logits", "unwritten-outside",
                          _leaves_outside_unwritten(changes_inside),
                          declared={"outside_window": "unwritten"})
    ev = evaluate(get_spec("fp8_paged_mqa_logits"), impl, Case("fp8_paged_mqa_logits"),
                  inputs=_paged_inputs(), runs=2)
    determinism = [r for r in ev.rows if r["check"] == "determinism"]
    assert determinism and all(r["verdict"] == ("fail" if changes_inside else "pass")
                               for r in determinism), ev.failures()
