"""mHC (manifold-constrained hyper-connections): mhc_pre, mhc_post, mhc_fused_post_pre, hc_head."""

from harness.core.family import Family
from kernels.mhc.ops import MHC_OPS
from kernels.mhc import faults, probes, spec, torch, triton  # noqa: F401  (registration on import)

FAMILY = Family(name="mhc", ops=MHC_OPS, faults=faults.FAULTS,
                probes=(probes.MHC_INPUTS,))
