"""The op names of the contract (``../shared/spec/ops.md``): the only names the registry accepts."""

MHC_OPS = ("mhc_pre", "mhc_post", "mhc_fused_post_pre", "hc_head")
TOPK_OPS = ("top_k_per_row_prefill", "top_k_per_row_decode")
INDEXER_OPS = ("fp8_quantize_k", "fp8_quantize_q", "indexer_k_quant_and_cache",
               "fp8_mqa_logits", "fp8_paged_mqa_logits")

OP_NAMES = MHC_OPS + TOPK_OPS + INDEXER_OPS


class UnknownOpError(KeyError):
    pass


def check_op(op: str) -> str:
    if op not in OP_NAMES:
        raise UnknownOpError(
            f"unknown op {op!r}; the harness knows {', '.join(OP_NAMES)}. "
            "Check the spelling against ../shared/spec/ops.md.")
    return op
