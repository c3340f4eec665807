"""vLLM's own sparse-indexer step (``rocm_aiter_sparse_attn_indexer`` of the installed release),
judged like the harness's composed step: top-k equal to the float64 reference's up to ties,
graph-padding rows -1, nothing written outside ``topk_indices_buffer[:num_tokens, :top_k]``, the K
cache equal to the reference's. vLLM's K-cache writer, gather and pack/unpack run as shipped (its
Triton kernels interpreted on CPU); the harness stands in for the compiled top-k and AITER
(``harness/adapters/vllm_indexer.py``).

The replay of vLLM PR 42810 rebuilds the pre-fix behaviour in a scratch copy of the installed
module (``../shared/spec/ops.md``): the decode path slicing the buffer with the real token count,
and the AITER prefill top-k left in global column numbers. Each must be flagged; the module as
installed must pass."""

import pathlib

import pytest

from harness.core.results import result_row
from harness.core.cases import Case
from harness.core.errors import ContractError
from kernels.sparse_indexer.step import judge_step, make_step, reference_step

pytestmark = pytest.mark.implementation("vllm")

vllm_indexer = pytest.importorskip("harness.adapters.vllm_indexer")

MIXES = [
    # decode requests, next_n, graph-padded requests, prefill tokens, prefill sequences
    (2, 1, 0, 0, 1),
    (3, 2, 0, 0, 1),
    (3, 2, 2, 0, 1),
    (5, 1, 3, 0, 1),
    (0, 1, 0, 40, 3),
    (3, 2, 0, 9, 2),
]
DECODE_SLICE = ("topk_indices = topk_indices_buffer[:num_padded_tokens, :topk_tokens]",
                "topk_indices = topk_indices_buffer[:num_decode_tokens, :topk_tokens]")
GLOBAL_PREFILL = ("    _localize_aiter_prefill_topk(indices, row_starts)\n", "")


@pytest.fixture(scope="module")
def installed():
    try:
        return vllm_indexer.load()
    except vllm_indexer.VllmIndexerUnavailable as exc:
        pytest.skip(str(exc))


def _case(mix, device, data="exact", **params) -> Case:
    batch, next_n, pad, prefill, seqs = mix
    return Case("fp8_paged_mqa_logits", device=device, batch=batch, next_n=next_n, pad=pad,
                prefill=prefill, seqs=seqs, context=300, heads=4, top_k=32, data=data,
                **{"block_size": 1, **params})


def _step(mix, device, data="exact", **params):
    return make_step(_case(mix, device, data, **params))


def _judge(module, b, **kw) -> dict:
    try:
        out = vllm_indexer.run_step(module, b, **kw)
    except (ContractError, RuntimeError) as exc:
        return {"passed": False, "detail": f"{type(exc).__name__}: {exc}"}
    return judge_step(b, out, reference_step(b), division=_writer_division(),
                      layout=_writer_layout())


def _writer_layout() -> str:
    """vLLM's step writes the cache with its Triton K-cache writer, whose blocks of more than one
    slot are 16x16 tiles (declared ``kv_layout: shuffle16``)."""
    from harness.core import registry

    writer = registry.records("indexer_k_quant_and_cache").get("vllm-triton")
    return writer.declared.get("kv_layout", "normal") if writer else "normal"


def _writer_division() -> str:
    """vLLM's step writes the cache with its Triton K-cache writer: judged as that writer
    declares (approximate fp32 division when compiled for an NVIDIA GPU)."""
    from harness.core import registry

    writer = registry.records("indexer_k_quant_and_cache").get("vllm-triton")
    return writer.declared.get("fp32_division", "exact") if writer else "exact"


@pytest.mark.parametrize("aiter_prefill_topk", [False, True], ids=["C-topk", "aiter-prefill-topk"])
@pytest.mark.parametrize("data", ["exact", "random"])
@pytest.mark.parametrize("mix", MIXES, ids=[f"dec{b}x{n}-pad{p}-pre{t}s{s}" for b, n, p, t, s in MIXES])
def test_vllm_indexer_step_selects_reference_topk(installed, mix, data, aiter_prefill_topk, record,
                                                   device):
    b = _step(mix, device, data)
    row = _judge(installed, b, aiter_prefill_topk=aiter_prefill_topk)
    record([result_row(_case(mix, device, data), "vllm", "indexer_step", "topk_indices_buffer",
                       op="indexer_step", tokens=b.num_tokens, prefill_topk=(
                           "aiter" if aiter_prefill_topk else "C"), **row)])
    assert row["passed"], row["detail"]


def test_padded_decode_path_assumes_rows_exactly_top_k_wide(installed, device):
    """Found here: with graph padding, vLLM unpacks the decode top-k with
    ``unpack_seq_triton``, which ignores the row stride of ``topk_indices_buffer[:n, :top_k]``.
    Harmless while vLLM allocates the buffer exactly top_k wide; a wider buffer (a shared one,
    or guard columns) gets guard values. The harness must see it."""
    row = _judge(installed, _step((3, 2, 2, 0, 1), device), buffer_as_allocated=False)
    assert not row["passed"] and "neither a valid offset nor -1" in row["detail"], row


def _replay(tmp_path, *changes) -> object:
    source = pathlib.Path(vllm_indexer.load().__file__).read_text()
    for old, new in changes:
        if old not in source:
            pytest.skip(f"this vLLM's {vllm_indexer.MODULE} no longer has the line the replay "
                        f"changes ({old.strip()!r})")
        source = source.replace(old, new)
    scratch = tmp_path / "rocm_aiter_mla_sparse_prefix.py"
    scratch.write_text(source)
    return vllm_indexer.load(scratch)


def test_replay_pr42810_decode_slice_with_real_token_count_is_flagged(installed, tmp_path, device):
    pre_fix = _replay(tmp_path, DECODE_SLICE)
    row = _judge(pre_fix, _step((3, 2, 2, 0, 1), device))
    assert not row["passed"] and "num_rows" in row["detail"], row
    assert _judge(installed, _step((3, 2, 2, 0, 1), device))["passed"]


def test_replay_pr42810_global_prefill_topk_is_flagged(installed, tmp_path, device):
    pre_fix = _replay(tmp_path, GLOBAL_PREFILL)
    row = _judge(pre_fix, _step((0, 1, 0, 40, 3), device), aiter_prefill_topk=True)
    assert not row["passed"], row
    assert _judge(installed, _step((0, 1, 0, 40, 3), device), aiter_prefill_topk=True)["passed"]


@pytest.mark.parametrize("block_size,head_dim", [(1, 64), (16, 128), (48, 64)])
def test_vllm_indexer_prefill_at_rocm_block_sizes(installed, block_size, head_dim, record,
                                                 device):
    """Prefill only, at the block sizes vLLM's ROCm indexer backend accepts (1, multiples of
    16) and head dims 128 and 64: vLLM's writer (SHUFFLE tiles above one slot) and its own
    gather (the same tiles) must agree, so the selection is the reference's."""
    case = _case((0, 1, 0, 40, 3), device, block_size=block_size, head_dim=head_dim)
    b = make_step(case)
    row = _judge(installed, b)
    record([result_row(case, "vllm", "indexer_step", "topk_indices_buffer", op="indexer_step",
                       tokens=b.num_tokens, **row)])
    assert row["passed"], row["detail"]


def test_vllm_decode_misreads_its_own_cache_above_one_slot_a_block(installed, device):
    """A finding (2026-11-28), kept as a guard so a fixed release is noticed: with AITER's paged
    logits unavailable (VLLM_ROCM_USE_AITER=0, or AITER without that kernel), vLLM 0.33.0's
    decode falls back to ``fp8_paged_mqa_logits_torch``, which reads blocks slot after slot,
    while its own writer tiles every block of more than one slot (SHUFFLE): at block size 16,
    which its ROCm backend accepts, the decode rows select from misread keys. Block size 1
    agrees (the mixes above)."""
    mix = (3, 1, 0, 0, 1)
    assert _judge(installed, _step(mix, device))["passed"]
    row = _judge(installed, _step(mix, device, block_size=16))
    assert not row["passed"], ("vLLM's decode now reads what its writer writes at block size "
                               "16: drop this guard and sweep the step at every block size")
