"""State carried between calls and between rows: every op judged on runs of eager calls with the
same shapes and new values and metadata (harness.detectors.call_sequence: in new buffers, and in
the first call's buffers refilled in place as a decode loop and a CUDA graph do, in-place
outputs left dirty; contexts short then long and long then short, requests turned into padding,
block tables and slot mappings redrawn), each call against the reference, for every
implementation, capturable or not; and top-k batches mixing rows on both sides of every
capacity threshold in every order (long, short, long), judged as any case is."""

import pytest

from harness.core import call_sequences
from harness.core.registry import KnownDeviationSeen
from harness.core.results import KNOWN_DEVIATION
from harness.detectors import call_sequence
from harness.evaluate import evaluate
from kernels.mhc.ops import MHC_OPS

TOPK = ("top_k_per_row_prefill", "top_k_per_row_decode")
QUANTIZE = ("fp8_quantize_k", "fp8_quantize_q")
OPS = MHC_OPS + TOPK + QUANTIZE + ("indexer_k_quant_and_cache", "fp8_mqa_logits",
                                   "fp8_paged_mqa_logits")
VALUES_ONLY = list(call_sequences.names())
ORDERED = list(call_sequences.names(("short-first", "long-first")))
HEADS = {"smoke": [4], "default": [64]}


def _check(target, record, case=None):
    """Every call within the contract, or ``KnownDeviationSeen`` where every difference is a
    deviation the implementation declares (what the strict xfail of such a case expects)."""
    finding = call_sequence.check(target.spec, target.impl, case or target.case)
    record(finding.rows)
    assert finding.passed, finding.explain()
    known = sorted({r["known_deviation"] for r in finding.rows if r["verdict"] == KNOWN_DEVIATION})
    if known:
        raise KnownDeviationSeen(f"{finding.impl}: " + "; ".join(known))


@pytest.mark.sweep(ops=MHC_OPS, hidden="smallest", tokens={"smoke": [7], "default": [64, 4099]},
                   calls=VALUES_ONLY)
def test_mhc_calls(target, record):
    _check(target, record)


@pytest.mark.sweep(ops=["top_k_per_row_decode"], tokens={"smoke": [8], "default": [64]},
                   top_k={"smoke": [16], "default": [512, 2048]},
                   context={"smoke": [300], "default": [32768]}, next_n=[1, 2], pad=[2],
                   calls=ORDERED)
def test_topk_decode_calls(target, record):
    _check(target, record)


@pytest.mark.sweep(ops=["top_k_per_row_prefill"], tokens={"smoke": [9], "default": [257]},
                   top_k={"smoke": [16], "default": [512, 2048]},
                   context={"smoke": [300], "default": [32768]}, calls=ORDERED)
def test_topk_prefill_calls(target, record):
    _check(target, record)


@pytest.mark.sweep(ops=QUANTIZE, tokens={"smoke": [7], "default": [64, 4099]}, heads=HEADS,
                   calls=VALUES_ONLY)
def test_quantisation_calls(target, record):
    _check(target, record)


@pytest.mark.sweep(ops=["indexer_k_quant_and_cache"], tokens={"smoke": [33], "default": [257]},
                   calls=VALUES_ONLY)
def test_k_cache_write_calls(target, record):
    _check(target, record)


@pytest.mark.sweep(ops=["fp8_mqa_logits"], tokens={"smoke": [9], "default": [257]}, seqs=[2],
                   heads=HEADS, context={"smoke": [300], "default": [8192]}, calls=ORDERED)
def test_prefill_logits_calls(target, record):
    _check(target, record)


@pytest.mark.sweep(ops=["fp8_paged_mqa_logits"], tokens={"smoke": [4], "default": [64]},
                   next_n=[1, 2], heads=HEADS, context={"smoke": [300], "default": [8192]},
                   calls=ORDERED)
def test_paged_logits_calls(target, record):
    _check(target, record)


def _straddling(target, record):
    ev = evaluate(target.spec, target.impl, target.case, runs=target.runs())
    record(ev.rows)
    ev.assert_passed()


@pytest.mark.sweep(ops=TOPK, tokens={"smoke": [18], "default": [36]},
                   top_k={"smoke": [16], "default": [16, 2048]}, context=[4224],
                   lengths=["straddle"], data={"smoke": ["ties"], "default": ["random", "ties"]})
def test_topk_rows_straddling_4096_columns(target, record):
    """Rows up to top_k, up to 4096 and up to 4224 columns as long, short, long, short, long,
    short for every pair, at the thresholds' cheapest crossings (16/17, 4096/4097: 18 rows,
    kernels/topk/batches.py). ``ties`` rows keep all of a long row in its threshold bin, so the
    shipped kernel's long rows take its multi-program finish and its short ones the registers."""
    _straddling(target, record)


@pytest.mark.sweep(ops=TOPK, tokens=[36], top_k={"smoke": [16], "default": [16, 2048]},
                   context={"smoke": [32769], "default": [32769, 65537]}, lengths=["straddle"],
                   data=["random", "ties"])
def test_topk_rows_straddling_32768_columns(target, record):
    """36 rows: every pair of bands up to top_k, 4096, 32768 and beyond (vLLM #49139's long,
    short, long). 36 x 32769 logits: past the interpreter's 2^18 elements, so on a CPU the torch
    paths run it and the Triton kernel on a GPU."""
    _straddling(target, record)
