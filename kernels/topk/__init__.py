"""Top-k per row (sparse-attention index selection): prefill (ragged windows) and decode."""

from kernels.topk import spec, torch, triton  # noqa: F401  (registration on import)
