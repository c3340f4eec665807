"""The mhc family's ops, declared to the registry before anything registers under them."""

from harness.core.ops import declare

MHC_OPS = declare("mhc", ("mhc_pre", "mhc_post", "mhc_fused_post_pre", "hc_head"))

FUSED_AS_COMPOSITION = {"composition": "mhc_post then mhc_pre of the same implementation"}
"""What an implementation of mhc_fused_post_pre that calls its own mhc_post and mhc_pre declares
(``Implementation.declared``): the sweep then runs the composition under the CPU interpreter
only at small token counts (harness.profiles.COMPOSED_INTERPRETER_MAX_TOKENS)."""
