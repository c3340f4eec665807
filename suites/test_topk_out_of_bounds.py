"""Out-of-bounds writes and slicing: graph-padded decode batches, next_n > 1, and prefill and
decode rows sharing one topk_indices_buffer (the vLLM PR 42810 class)."""

import dataclasses

import pytest
import torch

from harness import sanitize
from harness.evaluate import evaluate
from kernels.topk.ops import TOPK_OPS
from harness.core.device import triton_interpreted
from harness.core.registry import implementations, records
from harness.profiles import INTERPRETER_MAX_TOKENS
from harness.core.cases import Case
from harness.core.specs import Comparison, get_spec
from kernels.topk.compare import SENTINEL, guarded_buffer

OPS = TOPK_OPS

PADDED_BATCH = {"smoke": [1, 7], "default": [1, 7, 64, 256]}
MIXED = [(5, 3, 2, 4), (300, 64, 4, 64)]


@pytest.mark.sweep(ops=["top_k_per_row_decode"], batch=PADDED_BATCH, next_n=[1, 2, 4],
                   pad=[1, 5], top_k={"smoke": [16], "default": [2048]}, context={"smoke": [200],
                                                                       "default": [65536]})
def test_padded_decode_leaves_padding_rows_untouched(target, record):
    case = dataclasses.replace(
        target.case, tokens=target.case.param("batch") * target.case.param("next_n"))
    ev = evaluate(target.spec, target.impl, case, check="guard_band")
    record(ev.rows)
    ev.assert_passed()


def _impl_pairs():
    prefill, decode = (implementations(op) for op in TOPK_OPS)
    return sorted(set(prefill) & set(decode))


@pytest.mark.parametrize("name", _impl_pairs())
@pytest.mark.parametrize("prefill_rows,batch,next_n,pad", MIXED)
def test_mixed_prefill_and_decode_share_one_buffer(name, prefill_rows, batch, next_n, pad,
                                                  request):
    """Prefill rows first, then the decode rows padded for graphs, in one buffer pre-filled
    with -1: each op writes only its rows, padded decode rows stay -1, guards stay intact."""
    dev = request.config.getoption("device") or ("cuda" if torch.cuda.is_available() else "cpu")
    rows = prefill_rows + batch * next_n
    if records(TOPK_OPS[0])[name].triton and triton_interpreted() and rows > INTERPRETER_MAX_TOKENS:
        pytest.skip(f"{name} launches Triton kernels, which the CPU interprets (86 s for these "
                    f"{rows} rows); the small mixed batch runs here, this one on a GPU")
    k = 16
    pre_spec, dec_spec = get_spec(TOPK_OPS[0]), get_spec(TOPK_OPS[1])
    pre_in = pre_spec.make_inputs(Case(TOPK_OPS[0], tokens=prefill_rows, device=dev, top_k=k, context=300, seqs=3))
    dec_rows = batch * next_n
    dec_in = dec_spec.make_inputs(Case(TOPK_OPS[1], tokens=dec_rows, device=dev, top_k=k, context=300, next_n=next_n))
    buf = guarded_buffer(prefill_rows + dec_rows + pad, k, 0, dev)
    buf.fill_(-1)
    pre_view, dec_view = buf[:prefill_rows], buf[prefill_rows:]
    pre_spec.call(implementations(TOPK_OPS[0])[name], {**pre_in, "indices": pre_view})
    dec_spec.call(implementations(TOPK_OPS[1])[name], {**dec_in, "indices": dec_view})
    base = buf._base
    inner = torch.zeros_like(base, dtype=torch.bool)
    inner[2:2 + buf.shape[0], 2:2 + k] = True
    assert bool((base[~inner] == SENTINEL).all()), "a guard cell around the shared buffer changed"
    assert bool((dec_view[dec_rows:] == -1).all()), "padded decode rows were written"
    for spec, inputs, view in ((pre_spec, pre_in, pre_view), (dec_spec, dec_in, dec_view)):
        rows = int(inputs["num_rows"])
        [row] = spec.compare(Comparison(inputs, {"indices": view[:rows].clone()},
                                        spec.reference(inputs)))
        assert row["passed"], f"{spec.op} [{name}] in the shared buffer: {row['detail']}"


MEMCHECK_PARAMS = {"top_k_per_row_prefill": "top_k=2048,context=65536,seqs=3",
                   "top_k_per_row_decode": "top_k=2048,context=65536,next_n=2,pad=3"}


@pytest.mark.gpu
@pytest.mark.implementation("triton")
@pytest.mark.parametrize("op", TOPK_OPS)
def test_memcheck_clean(op):
    """One padded, next_n=2 case under compute-sanitizer memcheck: any report fails."""
    if sanitize.memcheck_tool() is None:
        pytest.skip("compute-sanitizer is not on PATH; install the CUDA toolkit to run memcheck")
    run = sanitize.memcheck(op, "triton", 64, MEMCHECK_PARAMS[op])
    assert run.clean, f"memcheck exit {run.returncode}:\n{run.output[-4000:]}"
