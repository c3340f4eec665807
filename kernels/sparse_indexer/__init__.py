"""Sparse-attention indexer: fp8 quantisation, the packed K cache, MQA logits (prefill, paged)."""

from harness.core.family import Family
from kernels.sparse_indexer.ops import INDEXER_OPS
from kernels.sparse_indexer import faults, probes, spec, torch, triton  # noqa: F401  (registration on import)

FAMILY = Family(name="sparse_indexer", ops=INDEXER_OPS, faults=faults.FAULTS,
                probes=(probes.INDEXER_CHECKS, probes.INDEXER_STEP, probes.PAGED_FAR_BLOCKS,
                        probes.OUTPUTS_PAST_2_31))
