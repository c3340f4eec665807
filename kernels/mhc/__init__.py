"""mHC (manifold-constrained hyper-connections): mhc_pre, mhc_post, mhc_fused_post_pre, hc_head."""

from kernels.mhc import spec, torch, triton  # noqa: F401  (registration on import)
