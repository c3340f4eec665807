"""Shipped kernels: one package per op family, one module per backend (torch = reference).

Each family exports ``FAMILY`` (harness.core.family.Family); the harness collects this tuple."""

from kernels import mhc, sparse_indexer, topk

FAMILIES = (mhc.FAMILY, topk.FAMILY, sparse_indexer.FAMILY)
