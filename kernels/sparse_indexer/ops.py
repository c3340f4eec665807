"""The sparse_indexer family's ops, declared to the registry before anything registers under them."""

from harness.core.ops import declare

INDEXER_OPS = declare("sparse_indexer", ("fp8_quantize_k", "fp8_quantize_q", "indexer_k_quant_and_cache",
     "fp8_mqa_logits", "fp8_paged_mqa_logits"))
