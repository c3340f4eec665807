"""Self-test probes of top-k per row (``harness selftest``, the ``topk_checks`` detector)."""

from harness.core.family import Probe

TOPK_CHECKS = Probe(
    "topk_checks", "top-k results that break the index contract",
    passes="contract, ties and guard bands hold",
    cases={
        "top_k_per_row_prefill": ((37, (("top_k", 16), ("context", 40), ("seqs", 3), ("clean", False))),
                                  (20, (("top_k", 16), ("context", 30), ("seqs", 2), ("data", "ties"))),
                                  (9, (("top_k", 16), ("context", 40), ("seqs", 2), ("data", "nan"))),
                                  (2, (("top_k", 2048), ("context", 8192), ("seqs", 1),
                                       ("data", "near-equal"))),
                                  (9, (("top_k", 16), ("context", 40), ("seqs", 2), ("data", "zeros")))),
        "top_k_per_row_decode": ((12, (("top_k", 16), ("context", 60), ("next_n", 2), ("pad", 3))),
                                 (16, (("top_k", 16), ("context", 60), ("next_n", 4), ("clean", False))),
                                 (12, (("top_k", 16), ("context", 60), ("next_n", 4),
                                       ("padded_requests", 2))),
                                 (3, (("top_k", 2048), ("context", 8192), ("data", "flood"))),
                                 (8, (("top_k", 16), ("context", 60), ("next_n", 2), ("data", "tiny"))),
                                 (12, (("top_k", 16), ("context", 60), ("next_n", 4),
                                       ("seq_lens_2d", True))),
                                 (6, (("top_k", 64), ("context", 60), ("next_n", 2),
                                      ("full_rows", True), ("clean", False)))),
    })
"""Small cases with row_starts > 0, rows both shorter and longer than k, next_n > 1, graph
padding, uncleaned tails, NaN inside windows, padded draft rows whose causal end is <= 0, two
long rows at k = 2048 (dense near-equal values; a tie flood at the threshold), all-zero rows,
subnormal rows, 2-D seq_lens and rows as long as the buffer: enough to expose every top-k index-contract, slicing,
NaN-ranking, on-chip-capacity, zero-as-empty, subnormal-flushing, seq_lens-layout and last-column fault."""

TOPK_PAST_2_31 = Probe(
    "topk_past_2_31", "top-k row offsets that overflow past 2^31 logits",
    passes="rows past 2^31 logits select their own top-k",
    cases={"top_k_per_row_decode": ((8200, (("top_k", 64), ("context", 262_144), ("next_n", 4),
                                             ("clean", True))),)})
"""8200 rows of 262144 columns (2.15e9 logits, 8.6 GB): GPU only, like its fault."""

TOPK_MIXED_ROWS = Probe(
    "topk_mixed_rows", "state carried from one row of a batch to the next",
    passes="batches of rows on both sides of top_k and 4096 columns, in every order, match",
    cases={op: ((18, (("top_k", 16), ("context", 4224), ("lengths", "straddle"))),)
           for op in ("top_k_per_row_prefill", "top_k_per_row_decode")})
"""18 rows at the cheapest crossings of top_k = 16 and 4096 columns (16/17, 4096/4097), long,
short, long and short, long, short for each pair (76k logits: seconds under the interpreter);
the 32768 crossing needs 36 rows of 32769 (kernels/topk/batches.py), a GPU run for Triton."""
