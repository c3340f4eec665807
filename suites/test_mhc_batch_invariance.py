"""Batch invariance: a token's mHC output is the same alone, in a small batch and in a large one."""

import pytest

from harness.detectors import batch_invariance
from kernels.mhc.ops import MHC_OPS

OPS = MHC_OPS


@pytest.mark.sweep("hidden")
def test_token_output_independent_of_batch(target, record):
    case = target.case.with_tokens(target.profile.batch_invariance_batch)
    finding = batch_invariance.check(target.spec, target.impl, case)
    record(finding.rows)
    assert finding.passed, finding.explain()


@pytest.mark.implementation("triton")
@pytest.mark.parametrize("op", ("mhc_pre", "hc_head"))
def test_launch_shapes_chosen_by_T_never_change_a_bit(op, device, monkeypatch):
    """The shipped mHC kernels choose four launch shapes by T (kernels.mhc.triton): the GEMM's
    token tile (``_gemm_block_t``, 64 or 128 rows), whether each K chunk writes its own partial
    (``_chunk_programs``: decode batches), the gates kernel's H tile (``_gates_block_h``) and how
    many programs share a token's weighted sum (``_h_parts``). A token's outputs would follow the
    batch unless every combination gives the same bits: each is forced in turn and compared
    bitwise (on a GPU on bf16 tensor cores)."""
    import dataclasses
    import itertools

    import torch

    from harness.core.cases import Case
    from harness.core.registry import records
    from harness.core.specs import get_spec
    from kernels.mhc import triton as mhc_triton

    impl = records(op).get("triton")
    if impl is None or not impl.available:
        pytest.skip(f"triton {op} not available here: {getattr(impl, 'reason', '')}")
    gpu = device == "cuda"
    spec = get_spec(op)
    inputs = spec.make_inputs(Case(op, tokens=300 if gpu else 3, hidden=4096 if gpu else 256,
                                   device=device))
    plan = (mhc_triton.DEFAULT_PLAN if gpu else  # on CPU: 2 splits of 4 chunks, 4 H blocks
            dataclasses.replace(mhc_triton.DEFAULT_PLAN, block_h=64, split_k_size=512, chunk_k=128))
    forced = []
    chunks = {"a program a chunk": lambda programs, chunks, device: chunks,
              "a program a split": lambda programs, chunks, device: 1}

    def force(name, choose):
        monkeypatch.setattr(mhc_triton, name, lambda *a: forced.append(name) or choose(*a))

    def outputs_of_every_shape(n_splits):
        outputs = {}
        for tile in (mhc_triton.SMALL_BLOCK_T, mhc_triton.DEFAULT_PLAN.block_t):
            for layout, per_split in chunks.items():
                for parts, wide in itertools.product((1, 4), (1, 2)):
                    force("_gemm_block_t", lambda *_, tile=tile: tile)
                    force("_chunk_programs", per_split)
                    force("_gates_block_h", lambda t, h, plan, head, wide=wide:
                          min(wide * plan.block_h, mhc_triton.next_power_of_2(h)))
                    force("_h_parts", lambda *_, parts=parts: parts)
                    mhc_triton.clear_launch_caches()  # launches are kept per shape
                    forced.clear()
                    label = (f"{tile}-row tile, {layout}, gates tile x{wide}, {parts} "
                             f"program{'s' if parts > 1 else ''} a token")
                    outputs[label] = spec.run(impl.fn, inputs, plan=plan, n_splits=n_splits)
                    assert {"_gemm_block_t", "_chunk_programs", "_gates_block_h",
                            "_h_parts"} <= set(forced), (
                        f"{label}: the call did not ask for its launch shapes ({forced})")
        return outputs

    # 3 splits: a short last chunk in each split and, in the last split, a chunk with no columns
    for n_splits in (None, 3):
        try:
            outputs = outputs_of_every_shape(n_splits)
        finally:  # none of the forced layouts outlives the test
            mhc_triton.clear_launch_caches()
        (first_label, first), *others = outputs.items()
        for label, out in others:
            for name in spec.outputs:
                assert torch.equal(out[name], first[name]), (
                    f"n_splits={n_splits}: {name} with a {label} differs from the {first_label} "
                    f"in {(out[name] != first[name]).sum().item()} of {out[name].numel()} values")


@pytest.mark.gpu
@pytest.mark.implementation("triton")
@pytest.mark.parametrize("op", ("mhc_pre", "hc_head"))
def test_calls_on_concurrent_streams_never_change_a_bit(op):
    """Calls running at once on two streams must share nothing (scratch, launch state) that
    changes a bit: decode calls (the GEMM a program a K chunk, whose chunk sums the gates kernel
    adds) are held behind a sleep on two streams, released together, and compared bitwise with
    the same calls run one after another."""
    import torch

    from harness.core.cases import Case
    from harness.core.registry import records
    from harness.core.specs import get_spec

    impl = records(op).get("triton")
    if impl is None or not impl.available:
        pytest.skip(f"triton {op} not available here: {getattr(impl, 'reason', '')}")
    spec = get_spec(op)
    calls = [spec.arguments(spec.make_inputs(Case(op, tokens=t, hidden=7168, seed=s, device="cuda")))
             for s, t in enumerate((1, 4, 16, 64, 1, 256, 8, 32))]

    def as_tuple(out):
        return tuple(out) if isinstance(out, tuple) else (out,)

    alone = [as_tuple(impl.fn(*args)) for args in calls]
    torch.cuda.synchronize()
    streams = (torch.cuda.Stream(), torch.cuda.Stream())
    together = [None] * len(calls)
    for stream in streams:
        with torch.cuda.stream(stream):
            torch.cuda._sleep(20_000_000)
    for repeat in range(4):
        for i, args in enumerate(calls):
            with torch.cuda.stream(streams[(i + repeat) % 2]):
                together[i] = as_tuple(impl.fn(*args))
    torch.cuda.synchronize()
    for i, (want, got) in enumerate(zip(alone, together)):
        for a, b in zip(want, got):
            assert torch.equal(a, b), (
                f"call {i} ({calls[i][0].shape[0]} tokens) differs when run beside calls on another "
                f"stream in {(a != b).sum().item()} of {a.numel()} values")
