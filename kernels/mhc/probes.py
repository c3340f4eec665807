"""Self-test probes of the mHC family (``harness selftest``, the ``mhc_inputs`` detector)."""

from harness.core.family import Probe

MHC_INPUTS = Probe(
    "mhc_inputs", "mHC results wrong on zero, tiny or outlier tokens or an unusual hidden size",
    passes="zero, tiny and outlier tokens and a hidden size beyond production match the reference",
    cases={op: ((33, (("hidden", 200), ("data", "zero-tokens"))),
                (33, (("hidden", 200), ("data", "tiny"))),
                (33, (("hidden", 200), ("data", "outliers"))), (9, (("hidden", 2880),)))
           for op in ("mhc_pre", "mhc_post", "mhc_fused_post_pre", "hc_head")})
"""Every value distribution of the mHC input space at a partial 128-token tile, and one hidden
size that is neither production size nor a multiple of 1024 (kernels/mhc/spec.py)."""
