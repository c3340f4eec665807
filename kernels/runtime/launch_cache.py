"""Launching a kernel that ``JITFunction.run`` compiled again, without its per-call work.

``JITFunction.run`` binds the arguments, builds the specialisation key as a string, looks the
kernel up and checks the kernel's globals on every call: about three times what the compiled
kernel's own launcher costs the host (docs/kernels/launches.md has the measurements). A
``kernels.runtime.triton_utils.Launch`` keeps the kernels ``JITFunction.run`` gave it under
``specialisation_key`` and calls their launchers directly. That key holds at least what Triton
3.6 specialises a compiled NVIDIA kernel on (an int's type by range, whether it is 1, whether it
divides by 16; a tensor's dtype and 16-byte alignment; a float's type), so a kernel found under
it is the one ``JITFunction.run`` would pick. Elsewhere (another Triton, ROCm, whose backend also
specialises on a tensor's size, the interpreter), with a launch hook set (a profiler), or inside
``through_jit``, every launch goes through ``JITFunction.run``.
"""

from __future__ import annotations

import contextlib
import functools

import torch
import triton
from triton import knobs
from triton.runtime.driver import driver

TESTED_TRITON = ("3.6.",)
"""Triton releases whose ``JITFunction.run`` and launcher were read for this module."""

_through_jit = False


@functools.cache
def _possible() -> bool:
    from kernels.runtime.device import triton_interpreted

    return (triton.__version__.startswith(TESTED_TRITON) and torch.version.hip is None
            and torch.cuda.is_available() and not triton_interpreted())


def usable() -> bool:
    """Whether a launch may skip ``JITFunction.run`` now."""
    if _through_jit or not _possible():
        return False
    return _unhooked(knobs.runtime.launch_enter_hook) and _unhooked(knobs.runtime.launch_exit_hook)


def _unhooked(hook) -> bool:
    """No launch hook (a profiler's) is set: Triton 3.6 keeps them in a ``HookChain``."""
    return hook is None or getattr(hook, "calls", None) == []


@contextlib.contextmanager
def through_jit():
    """Every ``Launch`` inside goes through ``JITFunction.run`` (what benchmarks record as bare
    launches)."""
    global _through_jit
    before, _through_jit = _through_jit, True
    try:
        yield
    finally:
        _through_jit = before


def specialisation_key(values: tuple) -> tuple | None:
    """What the kernel compiled for ``values`` depends on, or None for an argument of a kind not
    read here (that launch then goes through ``JITFunction.run``)."""
    key = []
    append = key.append
    for v in values:
        kind = type(v)
        if kind is torch.Tensor:
            append((v.dtype, not v.data_ptr() & 15))
        elif kind is int:
            append((v == 1, not v & 15, -2**31 <= v < 2**31, v >= 2**63))
        elif kind is float:
            append(float)
        elif kind is bool or v is None:
            append(v)
        elif isinstance(v, torch.Tensor):
            append((v.dtype, not v.data_ptr() & 15))
        else:
            return None
    return tuple(key)


def call_key(args: tuple, after: tuple) -> tuple | None:
    """A ``Launch``'s key for one call: the device and the arguments that vary per call (its
    own scalars are fixed; a kernel is kept only where they have a key too)."""
    head, tail = specialisation_key(args), specialisation_key(after)
    if head is None or tail is None:
        return None
    return current_device(), head, tail


def current_device() -> int:
    return driver.active.get_current_device()


class CompiledLaunch:
    """A compiled kernel, its grid and the constexpr values that follow the call's arguments
    in the kernel's signature (passed as ``JITFunction.run`` passes them; the launcher skips
    them)."""

    __slots__ = ("kernel", "grid", "tail")

    def __init__(self, jit, compiled, grid: tuple, n_values: int, constexprs: dict):
        params = list(jit.signature.parameters.values())[n_values:]
        self.kernel = compiled
        self.grid = (*grid, 1, 1)[:3]
        self.tail = tuple(constexprs[p.name] if p.name in constexprs else p.default
                          for p in params)

    def __call__(self, device: int, values: tuple) -> None:
        kernel, (x, y, z) = self.kernel, self.grid
        kernel.run(x, y, z, driver.active.get_current_stream(device), kernel.function,
                   kernel.packed_metadata, None, None, None, *values, *self.tail)
