"""The mhc family's ops, declared to the registry before anything registers under them."""

from harness.core.ops import declare

MHC_OPS = declare("mhc", ("mhc_pre", "mhc_post", "mhc_fused_post_pre", "hc_head"))
