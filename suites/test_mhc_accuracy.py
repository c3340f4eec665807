"""Every available mHC implementation against the float64 reference, across the profile's token
counts, hidden sizes and seeds, and just below and above the token counts where kernels switch
paths; cases run more than once must repeat their bits (harness.detectors.determinism)."""

import pytest

from harness.evaluate import evaluate
from kernels.mhc.ops import MHC_OPS

OPS = MHC_OPS


@pytest.mark.sweep("tokens", "hidden", "seed")
def test_matches_reference(target, record):
    ev = evaluate(target.spec, target.impl, target.case, runs=target.runs())
    record(ev.rows)
    ev.assert_passed()


@pytest.mark.sweep("seed", tokens="dispatch", hidden="smallest")
def test_matches_reference_across_dispatch_thresholds(target, record):
    """T = 1023/1025, 4095/4097, ...: vLLM switches its TileLang prenorm GEMM to block-M tiles at
    1024 tokens (PR 49429's carry-over between a block's rows lived only there)."""
    test_matches_reference(target, record)


@pytest.mark.sweep(tokens={"smoke": [33], "default": [33, 4099]}, hidden="smallest",
                   data=["zero-tokens", "tiny", "outliers"])
def test_matches_reference_on_zero_tiny_and_outlier_tokens(target, record):
    """All-zero tokens (graph padding: rsqrt(0 + eps)), tokens far below rms_eps in scale (eps
    inside the rsqrt), and massive activations (squares past fp16's range) (kernels/mhc/spec.py
    DISTRIBUTIONS)."""
    test_matches_reference(target, record)


@pytest.mark.sweep(tokens=[512], hidden={"smoke": [2880], "default": [2560, 2880, 6144]})
def test_matches_reference_at_hidden_sizes_beyond_production(target, record):
    """Hidden sizes other than 4096 and 7168, non-power-of-two and not multiples of 1024 or 128:
    a kernel tuned to the production sizes may drop a partial column tile. On a CPU the torch
    paths and user modules run them (the Triton interpreter stops at INTERPRETER_MAX_TOKENS)."""
    test_matches_reference(target, record)
