"""The sparse-attention indexer ops against the reference: bit-exact fp8 quantisation (K, Q, K
into the paged cache), and MQA logits (ragged prefill, paged decode) with the exact -inf mask
and finite values within the fp32-accumulation bound, across token counts, heads, sequence mixes,
next_n and shuffled block tables."""

import dataclasses

import pytest

from harness.detectors import config_invariance
from harness.evaluate import evaluate
from kernels.sparse_indexer import spec
from kernels.sparse_indexer.ops import INDEXER_OPS

OPS = INDEXER_OPS

QUANT_TOKENS = {"smoke": [1, 4, 67, 4099], "ci": [1, 4, 4099], "default": [1, 4, 4099, 65536]}
"""On a CPU the Triton kernels stop at INTERPRETER_MAX_TOKENS (their skip says so); the torch
paths and user modules run 4099 there too."""
HEADS = {"smoke": [4], "default": [64]}
PREFILL_QUERIES = {"smoke": [1, 7, 65], "ci": [1, 257, 2048], "default": [1, 257, 4096, 16384]}
PREFILL_SEQS = {"smoke": [1, 3], "default": [1, 7, 32]}
PREFILL_CONTEXT = {"smoke": [200], "ci": [2048], "default": [8192]}
DECODE_BATCH = {"smoke": [1, 3], "ci": [1, 16, 64], "default": [1, 16, 64, 256]}
DECODE_CONTEXT = {"smoke": [300], "ci": [8192], "default": [65536]}
NEXT_N = [1, 2, 4]


def _check(target, case, record):
    ev = evaluate(target.spec, target.impl, case, runs=target.runs(case))
    record(ev.rows)
    ev.assert_passed()


@pytest.mark.sweep(ops=["fp8_quantize_k", "indexer_k_quant_and_cache"], tokens=QUANT_TOKENS,
                   scale_fmt=[None, "ue8m0"])
def test_k_quantisation_is_bit_exact(target, record):
    _check(target, target.case, record)


@pytest.mark.sweep(ops=["fp8_quantize_q"], tokens=QUANT_TOKENS, heads=HEADS)
def test_q_quantisation_and_folded_weights_are_bit_exact(target, record):
    _check(target, target.case, record)


@pytest.mark.sweep(ops=["fp8_quantize_k", "fp8_quantize_q", "indexer_k_quant_and_cache"],
                   tokens=[67], heads=HEADS, scale_fmt=[None, "ue8m0"],
                   data=["zero-tokens", "fp8-max"])
def test_quantisation_of_zero_tokens_and_the_fp8_maximum(target, record):
    """All-zero tokens (the amax floor keeps the scale finite) and rows whose amax is exactly
    448 * 2^e (exact power-of-two scales, values on the e4m3 maximum)."""
    _check(target, target.case, record)


@pytest.mark.sweep(ops=["indexer_k_quant_and_cache"], tokens={"smoke": [67], "default": [67, 4099]},
                   slots=["runs"], data=["random", "zero-tokens"])
def test_k_cache_write_skips_runs_of_unused_slots(target, record):
    """The first and last quarter of slot_mapping -1, as a padded graph batch has them: nothing
    of theirs may reach the cache."""
    _check(target, target.case, record)


@pytest.mark.sweep(ops=["fp8_mqa_logits", "fp8_paged_mqa_logits"], tokens={"smoke": [34], "default": [258]},
                   seqs=[3], next_n=[2], context={"smoke": [300], "default": [4096]}, heads=HEADS,
                   data=["zero-tokens", "fp8-max"])
def test_logits_on_zero_tokens_and_the_fp8_maximum(target, record):
    """Zero keys and queries (logits of exactly 0 inside the window, never NaN) and keys and
    queries at the top of the e4m3 range (the largest products an fp8 kernel accumulates)."""
    _check(target, target.case, record)


@pytest.mark.sweep(ops=["fp8_paged_mqa_logits"], batch=[3], next_n=[3],
                   context={"smoke": [300], "default": [4096]}, heads=HEADS)
def test_paged_logits_with_next_n_not_a_power_of_two(target, record):
    """Three draft rows per request: a kernel that lays next_n rows out with tl.arange must pad
    them to a power of two (the shipped one did not: found by ``harness fuzz`` on the H100)."""
    rows = target.case.param("batch") * target.case.param("next_n")
    _check(target, dataclasses.replace(target.case, tokens=rows), record)


@pytest.mark.sweep(ops=["fp8_paged_mqa_logits"], batch=[5], next_n=[1, 2],
                   context={"smoke": [300], "default": [8192]}, heads=HEADS,
                   empty_requests=[2], shared_prefix=[True, False])
def test_paged_logits_with_empty_requests_and_shared_blocks(target, record):
    """Requests with no context (every logit of theirs -inf) and requests whose first blocks are
    another's (prefix caching: one physical block in several block tables)."""
    rows = target.case.param("batch") * target.case.param("next_n")
    _check(target, dataclasses.replace(target.case, tokens=rows), record)


@pytest.mark.gpu
@pytest.mark.sweep(ops=["fp8_paged_mqa_logits"], batch=[4], next_n=[2], context=[4096],
                   heads=[64], far_blocks=[True])
def test_paged_logits_past_2_31_bytes_of_cache(target, record):
    """A 2.1 GB cache whose used blocks lie past byte 2^31: a kernel computing byte offsets in
    32-bit arithmetic reads other blocks."""
    rows = target.case.param("batch") * target.case.param("next_n")
    _check(target, dataclasses.replace(target.case, tokens=rows), record)


@pytest.mark.gpu
@pytest.mark.sweep(ops=["fp8_paged_mqa_logits"], batch={"nightly": [8193], "full": [8193],
                                                        "default": []},
                   next_n=[2], context=[131072], heads=[64], sparse_rows=[True])
def test_paged_logits_past_2_31_elements(target, record):
    """8193 requests x 2 rows x 131072 columns: 2^31 + 2^18 logits (8.6 GB), the first request
    seeing a few keys, the last all 131072, the rest none. A kernel computing the output offset
    ``row * max_model_len`` in 32 bits writes the last request's rows elsewhere (ROCm/aiter
    #4244). Nightly only (a GPU with the memory to itself)."""
    rows = target.case.param("batch") * target.case.param("next_n")
    _check(target, dataclasses.replace(target.case, tokens=rows), record)


@pytest.mark.gpu
@pytest.mark.sweep(ops=["fp8_mqa_logits"], tokens={"nightly": [32769], "full": [32769],
                                                  "default": []},
                   context=[32768], heads=[64], sparse_rows=[True])
def test_prefill_logits_past_2_31_elements(target, record):
    """32769 queries over 32768 cached keys plus their own: 32769 x 65537 = 2^31 + 98305
    logits (8.6 GB), the first and last two rows seeing keys. A kernel computing ``m * N`` in
    32 bits writes the last rows elsewhere. Nightly only."""
    _check(target, target.case, record)


BLOCK_SIZES = list(spec.BLOCK_SIZES)


@pytest.mark.sweep(ops=["indexer_k_quant_and_cache"], tokens={"smoke": [67], "default": [67, 4099]},
                   block_size=BLOCK_SIZES, scale_fmt=[None, "ue8m0"])
def test_k_cache_write_at_every_block_size(target, record):
    """The K cache in blocks of 1 (ROCm's per-token cache: block bases not 16-byte aligned), 16,
    48, 64 and 128 slots: each slot's values and scale where the block-major layout puts them."""
    _check(target, target.case, record)


@pytest.mark.sweep(ops=["fp8_paged_mqa_logits"], batch=[3], next_n=[1, 2],
                   context={"smoke": [300], "default": [4096]}, heads=HEADS,
                   block_size=BLOCK_SIZES)
def test_paged_logits_at_every_block_size(target, record):
    """Paged logits over caches of 1, 16, 48, 64 and 128 slots a block, shuffled tables: a
    reader that assumes a block size reads other slots' values or scales."""
    rows = target.case.param("batch") * target.case.param("next_n")
    _check(target, dataclasses.replace(target.case, tokens=rows), record)


@pytest.mark.sweep(ops=["fp8_quantize_k", "fp8_quantize_q", "indexer_k_quant_and_cache",
                        "fp8_mqa_logits", "fp8_paged_mqa_logits"],
                   tokens={"smoke": [6], "default": [258]}, seqs=[3], next_n=[2],
                   context={"smoke": [300], "default": [4096]}, heads=HEADS,
                   head_dim=[32, 64], block_size=[1, 64])
def test_indexer_ops_at_other_head_dims(target, record):
    """Head dims 32 and 64 (DeepSeek-V3.2's is 128), with caches of 1 and 64 slots a block: an
    implementation that does not take a head dim declares it and refuses it with an error."""
    _check(target, target.case, record)


@pytest.mark.sweep(ops=["fp8_mqa_logits"], tokens=PREFILL_QUERIES, seqs=PREFILL_SEQS,
                   context=PREFILL_CONTEXT, heads=HEADS)
def test_prefill_logits_match_reference(target, record):
    _check(target, target.case, record)


@pytest.mark.sweep(ops=["fp8_mqa_logits"], tokens=[7], seqs=[1], context=[8300], heads=HEADS)
def test_prefill_logits_past_4096_keys_with_a_partial_block(target, record):
    """7933 keys (the case's cached context): above the 4096 where key-split paths start,
    ending in a block of 125 of 128 (a kernel that drops a last partial block only past some key
    count is caught here)."""
    _check(target, target.case, record)


@pytest.mark.sweep(ops=["fp8_paged_mqa_logits"], batch=DECODE_BATCH, next_n=NEXT_N,
                   context=DECODE_CONTEXT, heads=HEADS, shuffled=[True, False])
def test_paged_logits_match_reference(target, record):
    rows = target.case.param("batch") * target.case.param("next_n")
    _check(target, dataclasses.replace(target.case, tokens=rows), record)


@pytest.mark.gpu
@pytest.mark.sweep(ops=["fp8_paged_mqa_logits"], batch=[1, 16], next_n=[2], context=[131072],
                   heads=[64])
def test_paged_logits_at_131072_context(target, record):
    rows = target.case.param("batch") * target.case.param("next_n")
    _check(target, dataclasses.replace(target.case, tokens=rows), record)


@pytest.mark.sweep(ops=["fp8_mqa_logits", "fp8_paged_mqa_logits"], tokens={"smoke": [34], "default": [258]},
                   seqs=[3], next_n=[2], context={"smoke": [300], "default": [4096]}, heads=HEADS)
def test_logits_do_not_depend_on_the_launch_plan(target, record):
    """Every declared knob (the Triton kernels' launch ``plan``) within the bound of the
    reference and within the fp32 tolerance of the default plan."""
    if not target.impl.knobs:
        pytest.skip(f"{target.impl.name} declares no launch knobs for {target.op} (accumulation "
                    f"{target.impl.accumulation}: plan invariance is claimed where it is fp32)")
    finding = config_invariance.check(target.spec, target.impl, target.case)
    record(finding.rows)
    assert finding.passed, finding.explain()


@pytest.mark.implementation("triton")
def test_prefill_key_block_width_never_changes_a_logit(device):
    """The shipped prefill kernel takes key blocks of one or two halves by the call's size
    (kernels.sparse_indexer.triton.key_halves_for), so a query's logits would depend on the rest
    of the batch unless both widths give the same bits: compared bitwise on ragged windows (on a
    GPU on fp8 tensor cores, with 64 heads)."""
    import torch

    from harness.core.cases import Case
    from harness.core.registry import records
    from harness.core.specs import get_spec
    from kernels.sparse_indexer.triton import DEFAULT_PLAN

    impl = records("fp8_mqa_logits").get("triton")
    if impl is None or not impl.available:
        pytest.skip(f"triton prefill logits not available here: {getattr(impl, 'reason', '')}")
    gpu = device == "cuda"
    spec = get_spec("fp8_mqa_logits")
    inputs = spec.make_inputs(Case("fp8_mqa_logits", tokens=1000 if gpu else 70, device=device,
                                   heads=64 if gpu else 4, seqs=3, context=3000 if gpu else 300))
    one, two = (spec.call(impl.fn, inputs, plan=dataclasses.replace(DEFAULT_PLAN, key_halves=h))
                for h in (1, 2))
    assert torch.equal(one, two), (
        f"two-half key blocks differ from one-half blocks in {(one != two).sum().item()} of "
        f"{one.numel()} logits (NaN compares unequal: {one.isnan().sum().item()} NaN)")
