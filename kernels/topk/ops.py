"""The topk family's ops, declared to the registry before anything registers under them."""

from harness.core.ops import declare

TOPK_OPS = declare("topk", ("top_k_per_row_prefill", "top_k_per_row_decode"))
