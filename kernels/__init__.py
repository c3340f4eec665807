"""Shipped kernels: one package per op family, one module per backend (torch = reference)."""

from kernels import mhc, sparse_indexer, topk  # noqa: F401
