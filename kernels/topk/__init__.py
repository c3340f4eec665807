"""Top-k per row (sparse-attention index selection): prefill (ragged windows) and decode."""

from harness.core.family import Family
from kernels.topk.ops import TOPK_OPS
from kernels.topk import faults, probes, spec, torch, triton  # noqa: F401  (registration on import)

FAMILY = Family(name="topk", ops=TOPK_OPS, faults=faults.FAULTS,
                probes=(probes.TOPK_CHECKS, probes.TOPK_PAST_2_31, probes.TOPK_MIXED_ROWS))
