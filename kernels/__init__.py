"""Shipped kernels: one package per op family, one module per backend (torch = reference)."""

from kernels import mhc, topk  # noqa: F401
