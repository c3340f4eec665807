"""Shipped kernels: one package per op family, one module per backend (torch = reference), and
``kernels.runtime``, what the kernels need to run, standing alone.

Each family exports ``FAMILY`` (harness.core.family.Family); the harness collects ``FAMILIES``,
which loads the families on first use, so that ``kernels.runtime`` imports without them."""


def __getattr__(name: str):
    if name == "FAMILIES":
        from kernels import mhc, sparse_indexer, topk

        return (mhc.FAMILY, topk.FAMILY, sparse_indexer.FAMILY)
    raise AttributeError(f"module 'kernels' has no attribute {name!r}")
