"""The whole indexer step (quantise-and-cache K, quantise Q, prefill and paged logits, top-k
into one shared topk_indices_buffer), for every implementation name that provides all six
pieces: the selection must be the reference's top-k (up to ties, or up to the logits' rounding
bound on random data), graph-padding rows must stay -1, nothing outside
``buffer[:num_tokens, :top_k]`` may change, and the K cache must equal the reference's.

Requirement: on exact data (integers, power-of-two scales: every logit exact in fp32) the
selected logits must equal the reference's as a multiset, i.e. recall 1.0 up to exact ties; on
random data they may differ only by the logits' fp32 rounding bound (the documented floor: a
swap is allowed only between two keys whose logits are closer than that bound). Raw recall (the
fraction of the reference's indices selected) is recorded for information: relu makes many
logits exactly 0 when every head's score is negative, and choices among those ties lower raw
recall legitimately (0.92 on a 4-head CPU case where k exceeds the positive logits)."""

import pytest

from harness.core.registry import implementations
from harness.core.results import result_row
from harness.core.cases import Case
from kernels.sparse_indexer.step import STEP_OPS, judge_step, make_step, reference_step, run_step

MIXES = [
    # decode requests, next_n, padded requests, prefill tokens, prefill sequences
    (1, 1, 0, 0, 1),
    (3, 2, 2, 9, 2),
    (7, 4, 1, 33, 5),
    (0, 1, 0, 40, 3),
    (5, 1, 3, 0, 1),
]
SIZES = {"cpu": {"context": 300, "heads": 4, "top_k": 32},
         "cuda": {"context": 8192, "heads": 64, "top_k": 2048}}


def _step_impls():
    names = set.intersection(*(set(implementations(op)) for op in STEP_OPS))
    return sorted(names)


def _judge_step(case, impl, record) -> None:
    """The step of ``case`` run through ``impl``'s writer, reader and top-k, recorded and judged
    against the reference step."""
    b = make_step(case)
    impls = {op: implementations(op)[impl] for op in STEP_OPS}
    row = judge_step(b, run_step(b, impls), reference_step(b))
    record([result_row(case, impl, "indexer_step", "topk_indices_buffer", op="indexer_step",
                       tokens=b.num_tokens, **row)])
    assert row["passed"], f"{case.id} [{impl}]: {row['detail']}"


@pytest.mark.parametrize("impl", _step_impls())
@pytest.mark.parametrize("data", ["random", "exact"])
@pytest.mark.parametrize("mix", MIXES, ids=[f"dec{b}x{nn}-pad{p}-pre{t}s{s}" for b, nn, p, t, s in MIXES])
def test_step_selects_reference_topk(impl, data, mix, device, record):
    batch, next_n, pad, prefill, seqs = mix
    size = SIZES["cuda" if device == "cuda" else "cpu"]
    scale = 64 if device == "cuda" else 1
    case = Case("fp8_paged_mqa_logits", device=device, batch=batch * (8 if device == "cuda" else 1),
                next_n=next_n, pad=pad, prefill=prefill * scale, seqs=seqs, **size, data=data)
    _judge_step(case, impl, record)


@pytest.mark.parametrize("impl", _step_impls())
@pytest.mark.parametrize("block_size,head_dim", [(1, 128), (16, 64)])
def test_step_at_other_block_sizes_and_head_dims(impl, block_size, head_dim, device, record):
    """The step with its cache in blocks of 1 (ROCm's) and 16 slots, at head dims 128 and 64:
    each implementation's paged reader reads what its own K-cache writer wrote."""
    batch, next_n, pad, prefill, seqs = MIXES[1]
    size = SIZES["cuda" if device == "cuda" else "cpu"]
    case = Case("fp8_paged_mqa_logits", device=device, batch=batch, next_n=next_n, pad=pad,
                prefill=prefill, seqs=seqs, **size, data="exact", block_size=block_size,
                head_dim=head_dim)
    _judge_step(case, impl, record)
