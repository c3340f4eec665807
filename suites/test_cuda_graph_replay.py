"""CUDA-graph safety: the ops vLLM runs inside its decode graphs, captured once and replayed on
new inputs (new values, new sequence lengths), equal eager calls bitwise (the class of bugs vLLM
PR 42604 exposed when it turned full graphs on for DeepSeek-V4 Pro). An op that cannot be
captured at all (a host read on its hot path) fails with the reason, unless it declares so
(``declared={"cuda_graph": "not capturable: why"}``, as the torch top-k reference does).

The paged logits op is captured with its cache and block tables sized for the maximum context
(``capacity``, as vLLM sizes the buffers of a decode graph), and replayed on new context lengths,
block tables and values; every replay is also judged against the reference, so a value the
capture baked into the launch is caught even where eager calls carry it too."""

import pytest

from harness.detectors import cuda_graph
from kernels.mhc.ops import MHC_OPS

OPS = MHC_OPS + ("top_k_per_row_decode", "indexer_k_quant_and_cache", "fp8_paged_mqa_logits",
                 "fp8_quantize_k", "fp8_quantize_q")
DECODE_TOKENS = [64, 257]

pytestmark = pytest.mark.gpu


def _check(target, case, record):
    declared = target.impl.declared.get("cuda_graph", "")
    if declared.startswith("not capturable"):
        pytest.skip(f"{target.impl.name} declares itself {declared}")
    finding = cuda_graph.check(target.spec, target.impl, case)
    record(finding.rows)
    assert finding.passed, finding.explain()


@pytest.mark.sweep("hidden", ops=MHC_OPS, tokens=DECODE_TOKENS)
def test_mhc_replayed_graph_equals_eager(target, record):
    _check(target, target.case, record)


@pytest.mark.sweep(ops=["top_k_per_row_decode"], batch=[32], next_n=[1, 2], top_k=[512, 2048],
                   context=[32768], pad=[16])
def test_topk_decode_replayed_graph_equals_eager(target, record):
    case = target.case
    _check(target, case.with_tokens(case.param("batch") * case.param("next_n")), record)


@pytest.mark.sweep(ops=["indexer_k_quant_and_cache"], tokens=DECODE_TOKENS,
                   scale_fmt=[None, "ue8m0"])
def test_k_cache_write_replayed_graph_equals_eager(target, record):
    _check(target, target.case, record)


@pytest.mark.sweep(ops=["fp8_quantize_k", "fp8_quantize_q"], tokens=[257, 4099],
                   scale_fmt=[None, "ue8m0"], heads=[64])
def test_prefill_quantisation_replayed_graph_equals_eager(target, record):
    """vLLM's piecewise CUDA graphs capture the ops around attention at fixed token counts,
    prefill sizes included: the K and Q quantisers captured once and replayed on new values.
    (The prefill logits and prefill top-k are not: their shapes follow the batch's keys.)"""
    _check(target, target.case, record)


def test_a_failed_capture_gives_its_memory_back():
    """A host sync inside the capture (the finding the detector reports) must not leave this
    worker unable to return memory: ``torch.cuda.graph`` did, and the worker kept every byte it
    later allocated (72 GiB on an H100), so the other workers ran out of memory."""
    import torch

    def syncs_on_the_host():
        return torch.ones(1 << 20, device="cuda").sum().item()

    torch.cuda.empty_cache()
    before = torch.cuda.memory_reserved()
    with pytest.raises(RuntimeError, match="captur"):  # torch.AcceleratorError
        cuda_graph.capture(torch.cuda.CUDAGraph(), syncs_on_the_host)
    assert torch.cuda.current_stream() == torch.cuda.default_stream(), "left on the capture stream"
    block = torch.empty(2 ** 30, dtype=torch.uint8, device="cuda")
    block.fill_(1)
    del block
    torch.cuda.empty_cache()
    kept = torch.cuda.memory_reserved() - before
    assert kept < 2 ** 28, f"{kept / 2 ** 30:.2f} GiB stay reserved after a failed capture"


def test_a_failed_capture_leaves_no_error_words_behind():
    """The error words a kernel claims while it is being captured live in the graph's memory
    pool, which a failed capture gives back: they must be dropped with it, or every later
    ``deferred.raise_pending()`` of the worker reads freed memory (a false error in whatever
    test runs next)."""
    import dataclasses

    import torch

    from kernels.runtime import deferred
    from harness.core.cases import Case
    from harness.core.registry import records
    from harness.core.specs import get_spec

    op = "indexer_k_quant_and_cache"
    shipped = records(op)["triton"]

    def syncs_after_launching(*args, **kwargs):
        shipped.fn(*args, **kwargs)
        return torch.ones(1, device="cuda").item()

    impl = dataclasses.replace(shipped, fn=syncs_after_launching)
    finding = cuda_graph.check(get_spec(op), impl, Case(op, tokens=64, device="cuda"))
    assert not finding.passed and "cannot be captured" in finding.message, finding.explain()
    assert not deferred._CAPTURED, f"{len(deferred._CAPTURED)} captured error words left behind"


def test_a_failed_capture_leaves_random_numbers_working():
    """A capture that fails to end left PyTorch's CUDA generator in capture mode: the next
    ``torch.randn`` on the GPU, in whatever test came next, raised "Offset increment outside
    graph capture encountered unexpectedly"."""
    import torch

    def syncs():
        torch.ones(1, device="cuda").item()

    with pytest.raises(RuntimeError):
        cuda_graph.capture(torch.cuda.CUDAGraph(), syncs)
    assert torch.randn(4, device="cuda").isfinite().all()


def _captured_k_cache_write():
    """(graph, inputs) of the shipped K-cache write captured on valid slots, after an eager call
    (which compiles it and makes the device's pool of captured error words)."""
    import torch

    from kernels.runtime import deferred
    from harness.core.cases import Case
    from harness.core.registry import records
    from harness.core.specs import get_spec

    op = "indexer_k_quant_and_cache"
    spec, fn = get_spec(op), records(op)["triton"].fn
    inputs = spec.make_inputs(Case(op, tokens=64, device="cuda"))
    args = spec.arguments(inputs)
    fn(*args)
    deferred.raise_pending()
    graph = torch.cuda.CUDAGraph()
    cuda_graph.capture(graph, lambda: fn(*args))
    return graph, inputs


def test_a_bad_replay_is_not_hidden_by_a_clean_replay_after_it():
    import torch

    from kernels.runtime import deferred
    from harness.core.errors import ContractError

    try:
        graph, inputs = _captured_k_cache_write()
        slots = inputs["slot_mapping"]
        good = slots.clone()
        slots[3] = -5
        graph.replay()
        slots.copy_(good)
        graph.replay()
        torch.cuda.synchronize()
        with pytest.raises(ContractError, match="token 3 has one below -1"):
            deferred.raise_pending()
        graph.replay()
        torch.cuda.synchronize()
        deferred.raise_pending()
    finally:
        deferred.forget_captured()


def test_a_captured_checked_call_replays_its_kernel_alone():
    """The error word of a captured call is zeroed before the capture, not by a kernel of the
    graph (which cost 1.3-1.7 us a call on the H100)."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    from kernels.runtime import deferred

    try:
        graph, _ = _captured_k_cache_write()
        graph.replay()
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            graph.replay()
            torch.cuda.synchronize()
        kernels = {e.key for e in prof.key_averages() if e.device_time_total > 0}
        assert kernels == {"_quant_into_cache"}, f"one replay ran {sorted(kernels)}"
    finally:
        deferred.forget_captured()


@pytest.mark.sweep(ops=["fp8_paged_mqa_logits"], batch=[1, 32], next_n=[1, 2], context=[8192],
                   heads=[64], capacity=[True])
def test_paged_logits_replayed_graph_equals_eager(target, record):
    case = target.case
    _check(target, case.with_tokens(case.param("batch") * case.param("next_n")), record)


@pytest.mark.parametrize("changes_inside", [False, True], ids=["outside-only", "inside-too"])
def test_replays_compare_only_the_cells_an_implementation_writes(changes_inside):
    """An implementation declaring ``outside_window: unwritten`` (SGLang's TileLang paged logits)
    holds other bytes outside the windows in a replay than in an eager call: the bitwise
    comparison skips those cells, and a logit inside a window that moves still fails it."""
    import dataclasses

    import torch

    from harness.core.cases import Case
    from harness.core.registry import records
    from harness.core.specs import get_spec

    op = "fp8_paged_mqa_logits"
    shipped = records(op)["triton"]
    calls = torch.zeros((), device="cuda")

    def outside_left_as_the_buffer_held(*args, **kwargs):
        out = shipped.fn(*args, **kwargs)
        calls.add_(1)
        outside = torch.isneginf(out)
        out = torch.where(outside, calls, out)
        return out + (~outside) * calls * 2.0 ** -4 if changes_inside else out

    impl = dataclasses.replace(shipped, fn=outside_left_as_the_buffer_held,
                               declared={**shipped.declared, "outside_window": "unwritten"})
    case = Case(op, tokens=4, device="cuda", batch=2, next_n=2, context=8192, heads=64,
                capacity=True)
    finding = cuda_graph.check(get_spec(op), impl, case)
    bitwise = [r for r in finding.rows if r["output"] == "logits"]
    assert bitwise, f"no bitwise replay row: {finding.explain()}"
    assert finding.passed != changes_inside, finding.explain()
    assert all(r["verdict"] == ("fail" if changes_inside else "pass") for r in bitwise), \
        finding.explain()
