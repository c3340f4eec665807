"""Poisoned outputs: every buffer an implementation allocates starts as a sentinel, so an
element it forgets to write shows up as NaN (floats) or a wild value (integers) instead of a
lucky zero.

Allocations through ``torch.empty*`` / ``new_empty`` from Python are intercepted with a
``TorchFunctionMode``; on CUDA the caching allocator's free blocks are also flooded with NaN
bytes first, so allocations made from C++ see the poison too.
"""

from __future__ import annotations

import contextlib

import torch
from torch.overrides import TorchFunctionMode

from harness.core.results import KNOWN_DEVIATION, Finding
from harness.evaluate import evaluate
from harness.core.registry import Implementation
from harness.core.cases import Case
from harness.core.specs import OpSpec

INT_SENTINEL = 0x5A5A5A5A
_ALLOCATORS = {torch.empty, torch.empty_like, torch.empty_strided, torch.Tensor.new_empty}


def fill_sentinel(t: torch.Tensor) -> torch.Tensor:
    if t.is_floating_point() or t.is_complex():
        return t.fill_(float("nan"))
    if t.dtype == torch.bool:
        return t.fill_(True)
    info = torch.iinfo(t.dtype)
    return t.fill_(min(INT_SENTINEL, info.max))


class _PoisonAllocations(TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if func in _ALLOCATORS and isinstance(out, torch.Tensor) and out.numel():
            with torch.no_grad():
                fill_sentinel(out)
        return out


SMALLEST_FLOOD = 1 << 26
"""Bytes below which flooding stops trying (64 MiB)."""


def _flood_cuda_cache(device: torch.device, fraction: float = 0.25) -> int:
    """NaN into ``fraction`` of the device's free memory, then freed into the caching allocator,
    so the implementation's next allocations reuse poisoned blocks; the bytes flooded. The GPU
    may be shared (xdist workers, other jobs): memory free when asked can be taken before the
    block is, so a flood that does not fit is halved and tried again (never an out-of-memory
    failure of the case, which would make the run "could not test")."""
    free, _ = torch.cuda.mem_get_info(device)
    size = int(free * fraction) // 4 * 4
    while size >= SMALLEST_FLOOD:
        try:
            block = torch.full((size // 4,), float("nan"), dtype=torch.float32, device=device)
        except torch.OutOfMemoryError:
            size //= 2
            continue
        del block
        return size
    return 0


@contextlib.contextmanager
def poisoned_allocations(device: str | torch.device = "cpu"):
    device = torch.device(device)
    if device.type == "cuda":
        _flood_cuda_cache(device)
    with _PoisonAllocations():
        yield


def check(spec: OpSpec, impl: Implementation, case: Case) -> Finding:
    inputs = spec.make_inputs(case)
    ref = spec.reference(inputs)
    with poisoned_allocations(case.device):
        ev = evaluate(spec, impl, case, inputs=inputs, ref=ref, check="poisoned_outputs")
    passed = bool(ev.rows) and not any(r["verdict"] == "fail" for r in ev.rows)
    known = any(r["verdict"] == KNOWN_DEVIATION for r in ev.rows)
    message = ("every output element written (no sentinel survived)"
               + (" (known deviation reported apart)" if known else "") if passed
               else ev.failures())
    return Finding("poisoned_outputs", spec.op, impl.name, passed, message, ev.rows)
