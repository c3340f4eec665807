"""What the shipped kernels ask of the device they run on: a GPU or the Triton interpreter, its
multiprocessor count for launch shapes, and why Triton cannot run here when it cannot."""

from __future__ import annotations

import functools
import os

import torch


def has_gpu() -> bool:
    return torch.cuda.is_available()


@functools.lru_cache(maxsize=64)
def multiprocessors(device: torch.device) -> int | None:
    """Streaming multiprocessors of a CUDA (or ROCm) device; None for any other device. Cached:
    launch shapes ask for it on every call."""
    if device.type != "cuda":
        return None
    return torch.cuda.get_device_properties(device).multi_processor_count


def triton_interpreted() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def triton_unavailable_reason() -> str | None:
    """None when Triton kernels can run here, else why they cannot and what to do."""
    try:
        import triton  # noqa: F401
    except ImportError as exc:
        return f"triton is not installed ({exc}); install it with `pip install triton`"
    if has_gpu() or triton_interpreted():
        return None
    return ("no GPU and TRITON_INTERPRET is off; set TRITON_INTERPRET=1 (or unset "
            "HARNESS_NO_TRITON_INTERPRET) to run the Triton kernels under the interpreter")
