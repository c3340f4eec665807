"""Self-test probes of the sparse-attention indexer: its ops one by one (``indexer_checks``) and
the whole indexer step (``indexer_step``)."""

from __future__ import annotations

from harness.core.family import Probe
from harness.core.registry import Implementation, records
from harness.core.results import Finding, result_row
from harness.core.cases import Case
from harness.core.specs import OpSpec
from kernels.sparse_indexer.step import STEP_OPS, decode_rows, judge_step, make_step, \
    reference_step, run_step

INDEXER_CHECKS = Probe(
    "indexer_checks", "indexer results that break the index, visibility or fp8 contract",
    passes="bit-exact quantisation, mask and logits bounds hold",
    cases={
        "fp8_quantize_k": ((37, ()), (9, (("scale_fmt", "ue8m0"),))),
        "fp8_quantize_q": ((13, (("heads", 4),)), (5, (("heads", 4), ("data", "fp8-max")))),
        "indexer_k_quant_and_cache": ((70, ()), (20, (("scale_fmt", "ue8m0"),)),
                                      (20, (("data", "zero-tokens"), ("slots", "runs"))),
                                      (20, (("block_size", 1),)),
                                      (20, (("block_size", 16), ("head_dim", 64)))),
        "fp8_mqa_logits": ((29, (("heads", 4), ("seqs", 3), ("context", 200))),
                           (16, (("heads", 8), ("seqs", 1), ("context", 0))),
                           (65, (("heads", 8), ("seqs", 2), ("context", 256))),
                           (7, (("heads", 4), ("seqs", 1), ("context", 8300)))),
        "fp8_paged_mqa_logits": ((12, (("heads", 4), ("next_n", 2), ("context", 300))),
                                 (7, (("heads", 4), ("context", 130))),
                                 (8, (("heads", 4), ("next_n", 2), ("context", 300),
                                      ("empty_requests", 1), ("shared_prefix", True))),
                                 (6, (("heads", 4), ("next_n", 2), ("context", 100),
                                      ("block_size", 1))),
                                 (3, (("heads", 4), ("context", 100), ("block_size", 16),
                                      ("head_dim", 64)))),
    })
"""Small indexer cases: ragged windows with context, a query row that sees a single key, next_n
draft rows, shuffled block tables over a cache full of garbage bytes; one prefill call with more
than FP8_MMA_SAMPLE visible logits, where the fp8-mma class judges the spread of the errors; one
with more than 4096 keys ending in a partial block of 128; all-zero K tokens written past runs of
-1 slots; Q rows at the top of the e4m3 range; a paged batch with an empty request and shared
prefix blocks; caches of blocks of 1 and 16 slots, and head dim 64."""

PAGED_FAR_BLOCKS = Probe(
    "paged_far_blocks", "paged-cache offsets that overflow past 2^31 bytes",
    passes="a paged cache read past 2^31 bytes matches the reference",
    cases={"fp8_paged_mqa_logits": ((6, (("heads", 4), ("next_n", 2), ("context", 300),
                                         ("far_blocks", True))),)})
"""A 2.1 GB paged cache whose used blocks lie past byte 2^31 (GPU only: the fault that reads it
through 32-bit offsets is declared needs_gpu)."""

OUTPUTS_PAST_2_31 = Probe(
    "outputs_past_2_31", "logits offsets that overflow past 2^31 elements",
    passes="logits tensors of more than 2^31 elements match the reference in their last rows",
    cases={"fp8_paged_mqa_logits": ((16386, (("heads", 4), ("next_n", 2), ("batch", 8193),
                                             ("context", 131072), ("sparse_rows", True))),),
           "fp8_mqa_logits": ((32769, (("heads", 4), ("context", 32768),
                                       ("sparse_rows", True))),)})
"""Paged logits of 8193 x 2 rows x 131072 and prefill logits of 32769 x 65537 (each 8.6 GB,
just past 2^31 elements), only their first and last rows seeing keys: GPU only, like their
faults."""

STEP_PROBES = (
    (("batch", 3), ("next_n", 2), ("pad", 2), ("prefill", 9), ("seqs", 2), ("context", 300),
     ("heads", 4), ("top_k", 32)),
    (("batch", 2), ("next_n", 4), ("pad", 1), ("context", 200), ("heads", 4), ("top_k", 16),
     ("data", "exact")),
)
"""Mixed prefill + decode with graph padding and next_n > 1; the exact-data step must select the
reference's top-k up to ties."""


def indexer_step(spec: OpSpec, impl: Implementation, profile, base: Case) -> Finding:
    """The whole indexer step with ``impl`` as its ``impl.op`` piece (every other piece from the
    same implementation name where it exists, else the torch reference)."""
    impls = {}
    for op in STEP_OPS:
        rec = records(op).get(impl.name)
        impls[op] = rec.fn if rec is not None and rec.available else records(op)["torch"].fn
    impls[impl.op] = impl.fn
    view = getattr(impl.fn, "step_decode_view", decode_rows)
    rows, problems = [], []
    for params in STEP_PROBES:
        case = Case("fp8_paged_mqa_logits", seed=base.seed, device=base.device, params=params)
        batch = make_step(case)
        try:
            row = judge_step(batch, run_step(batch, impls, decode_view=view), reference_step(batch))
        except Exception as exc:  # a crash of the step is a finding, not a pass
            row = {"passed": False, "detail": f"step raised {type(exc).__name__}: {exc}"}
        rows.append(result_row(case, impl.name, "indexer_step", "topk_indices_buffer",
                               op=impl.op, **row))
        if not row["passed"]:
            problems.append(f"{case.id}: {row['detail']}")
    message = "; ".join(problems) if problems else "step selects the top-k, padding rows -1, guards intact"
    return Finding("indexer_step", impl.op, impl.name, not problems, message, rows)


INDEXER_STEP = Probe(
    "indexer_step", "an indexer step that slices padded batches wrongly",
    passes="step selects the top-k, padding rows -1, guards intact", run=indexer_step)
