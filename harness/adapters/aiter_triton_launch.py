"""How the AITER adapter launches AITER's own wrappers: AMD-only launch options, guarded outputs.

AITER's wrappers pass launch options that only Triton's AMD backend knows (``fp8_mqa_logits``
passes ``waves_per_eu=2, matrix_instr_nonkdim=16``). Triton 3.6 compiling for NVIDIA raises
``KeyError(... unrecognised)`` on them; its interpreter ignores them. :func:`launching` returns a
copy of a wrapper whose kernels drop those options where Triton compiles for NVIDIA and the
backend does not know them, and nothing else: same kernel, same arguments, same grid. The
vendor's module is not modified (the copy has its own globals).

Kernels that store whole tiles can write past the row they own. Outputs the harness hands a
kernel get a guard tail of ``GUARD`` elements (:func:`guarded_full`); an output a wrapper
allocates itself is launched as a guarded copy of the same shape, strides and contents and
copied back (``output_arg``). A write into a guard tail raises :class:`ContractViolation`
(a failed case naming how many values landed there): on a CPU such a write would otherwise
corrupt the heap and abort the process ("corrupted size vs. prev_size").
"""

from __future__ import annotations

import functools
import math
import types

import torch

from harness.core.errors import ContractViolation

AMD_ONLY_OPTIONS = ("waves_per_eu", "matrix_instr_nonkdim", "kpack")
GUARD = 1024
"""Guard elements after an output: more than one tile of any of these kernels (128 keys in
fp8_mqa_logits, 64 in the paged kernels of amd-aiter 0.1.7, 256 in later ROCm/aiter)."""
GUARD_BITS = 0x7FC00A17
"""The guard's fill, a NaN payload no kernel computes: any other bits there were written."""


def _compiles(kernel) -> bool:
    """Whether ``kernel`` is compiled (a JITFunction under any autotuner or heuristics), not the
    interpreter's stand-in. Asked of the kernel, not of TRITON_INTERPRET: Triton chose when the
    module was imported, and a run that later asks for CPU tensors turns the variable on in the
    same process while AITER's kernels stay compiled."""
    from triton.runtime.interpreter import InterpretedFunction
    from triton.runtime.jit import JITFunction

    for _ in range(8):
        if isinstance(kernel, (JITFunction, InterpretedFunction)) or not hasattr(kernel, "fn"):
            break
        kernel = kernel.fn
    return isinstance(kernel, JITFunction)


def _compiled_for_nvidia(kernel) -> bool:
    from harness.core.device import has_gpu

    return has_gpu() and torch.version.hip is None and _compiles(kernel)


@functools.cache
def _backend_options() -> frozenset[str]:
    from triton.compiler import make_backend
    from triton.runtime import driver

    return frozenset(make_backend(driver.active.get_current_target()).parse_options({}).__dict__)


def options_to_drop(kernel) -> frozenset[str]:
    """The AMD-only launch options Triton would reject for ``kernel`` here (none unless it
    compiles for NVIDIA)."""
    if not _compiled_for_nvidia(kernel):
        return frozenset()
    return frozenset(AMD_ONLY_OPTIONS) - _backend_options()


def guarded_full(shape, value: float, device) -> tuple[torch.Tensor, torch.Tensor]:
    """(a contiguous float32 tensor of ``shape`` filled with ``value``, the guard tail after it)."""
    numel = math.prod(shape)
    buf = torch.empty(numel + GUARD, dtype=torch.float32, device=device)
    buf[:numel].fill_(value)
    buf[numel:].view(torch.int32).fill_(GUARD_BITS)
    return buf[:numel].view(shape), buf[numel:]


def check_guard(tail: torch.Tensor, what: str) -> None:
    """Raise ContractViolation when anything was written into ``tail`` (not while a CUDA graph
    is being captured: reading it back would break the capture)."""
    if tail.is_cuda and torch.cuda.is_current_stream_capturing():
        return
    written = int((tail.view(torch.int32) != GUARD_BITS).sum())
    if written:
        raise ContractViolation(f"{what} wrote {written} value(s) past the end of its output "
                                f"(into the {GUARD}-element guard after it)")


def _guarded_copy(out: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    if not out.is_contiguous() or out.dtype != torch.float32:
        raise ContractViolation(f"expected the wrapper's output to be a contiguous float32 "
                                f"tensor, got {out.dtype} with strides {tuple(out.stride())}")
    copy, tail = guarded_full(out.shape, 0.0, out.device)
    copy.copy_(out)
    return copy, tail


class _Launch:
    """``kernel[grid](...)`` as a wrapper writes it, with ``drop`` options removed and the
    ``output_arg`` tensor launched as a guarded copy."""

    def __init__(self, kernel, name: str, output_arg: str | None):
        self.kernel, self.name, self.output_arg = kernel, name, output_arg

    def __getitem__(self, grid):
        def launch(*args, **kwargs):
            for option in options_to_drop(self.kernel):
                kwargs.pop(option, None)
            out = kwargs.get(self.output_arg) if self.output_arg else None
            if out is None:
                return self.kernel[grid](*args, **kwargs)
            kwargs[self.output_arg], tail = _guarded_copy(out)
            result = self.kernel[grid](*args, **kwargs)
            out.copy_(kwargs[self.output_arg])
            check_guard(tail, self.name)
            return result
        return launch


def kernels_launched(fn) -> dict[str, object]:
    """The Triton kernels ``fn`` refers to by a global name: {name: kernel}."""
    from triton.runtime.jit import KernelInterface

    return {name: fn.__globals__[name] for name in fn.__code__.co_names
            if isinstance(fn.__globals__.get(name), KernelInterface)}


def launching(fn, output_arg: str | None = None):
    """A copy of the wrapper ``fn`` whose kernels launch through :class:`_Launch`."""
    kernels = kernels_launched(fn)
    if output_arg is not None:
        missing = [n for n, k in kernels.items() if output_arg not in getattr(k, "arg_names", ())]
        if not kernels or missing:
            raise LookupError(f"{fn.__module__}.{fn.__qualname__} launches no kernel with an "
                              f"argument {output_arg!r} ({', '.join(kernels) or 'no kernels'})")
    scope = {**fn.__globals__, **{name: _Launch(kernel, f"{fn.__qualname__} ({name})", output_arg)
                                  for name, kernel in kernels.items()}}
    copy = types.FunctionType(fn.__code__, scope, fn.__name__, fn.__defaults__, fn.__closure__)
    copy.__kwdefaults__ = fn.__kwdefaults__
    return functools.update_wrapper(copy, fn)
