"""Sparse-attention indexer: fp8 quantisation, the packed K cache, MQA logits (prefill, paged)."""

from kernels.sparse_indexer import spec, torch, triton  # noqa: F401  (registration on import)
