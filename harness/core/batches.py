"""Moved to :mod:`kernels.topk.batches` (the core holds no family's helpers); this path keeps
working, with a DeprecationWarning."""

from harness.core.moved import alias

alias(__name__, "kernels.topk.batches")
