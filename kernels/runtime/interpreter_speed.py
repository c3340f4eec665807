"""Stop the Triton interpreter from re-patching triton.language on every device-function call.

Under ``TRITON_INTERPRET=1`` a kernel launch patches ``triton.language`` once for its whole grid
(``GridExecutor.__call__``: ``_patch_lang``, then ``restore`` after the last program). Triton
3.6 also calls ``_patch_lang`` on every call of a ``@triton.jit`` helper inside the kernel
(``InterpretedFunction.__call__``), and each call walks ``inspect.getmembers`` over the language
modules, milliseconds each time, to patch what the grid has already patched. The harness's
kernels call helpers in their inner loops (``to_bf16_rtne``, ``dot_bf16``), thousands of times
a call, so on the CPU, left alone, this walk takes a large share of the mHC suites' time
(docs/kernels/harness_core.md has the measurements); triton.language's own ``tl.sum``,
``tl.zeros`` and ``tl.sigmoid`` are such helpers too.

:func:`install` makes a helper call skip the walk while the running grid has already patched
every language module the helper sees (the first helper reaching ``triton.language.core`` patches
it, as the interpreter does, and the interpreter never restores a helper's patches either); a
call outside a grid patches as before. Nothing changes in what the interpreter computes:
``suites/test_interpreter_matches_gpu_numerics.py`` runs kernels with and without it bitwise.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import threading

_state = threading.local()


@functools.lru_cache(maxsize=None)
def _languages(fn) -> frozenset[int]:
    """The language modules ``fn`` sees (what ``_patch_lang`` patches for it)."""
    import triton.language as tl

    return frozenset(id(value) for value in fn.__globals__.values()
                     if inspect.ismodule(value) and value in (tl, tl.core))


_originals: dict[str, object] = {}
_ufuncs: dict[object, object] = {}
"""Combine functions (their ``JITFunction``) the interpreter reduces with a numpy ufunc."""


def vectorised_reduction(combine_fn, ufunc) -> None:
    """Declare ``combine_fn(a, b)`` to be ``ufunc`` (associative and commutative, exact, e.g.
    ``numpy.bitwise_or``): under the interpreter, ``tl.reduce`` with it runs ``ufunc.reduce``."""
    _ufuncs[combine_fn] = ufunc


@functools.cache
def install() -> bool:
    """Patch the interpreter (idempotent); False where it is not shaped as expected (another
    Triton release), leaving it as it is."""
    try:
        from triton.runtime import interpreter
    except ImportError:
        return False
    grid = getattr(interpreter, "GridExecutor", None)
    patch_lang = getattr(interpreter, "_patch_lang", None)
    scope_type = getattr(interpreter, "_LangPatchScope", None)
    if grid is None or patch_lang is None or scope_type is None:
        return False
    run_grid = grid.__call__

    def patch_once(fn):
        patched = getattr(_state, "languages", None)
        wanted = _languages(fn)
        if patched is not None and wanted <= patched:
            return scope_type()
        scope = patch_lang(fn)
        if getattr(_state, "in_grid", False):
            _state.languages = wanted | (patched or frozenset())
        return scope

    def grid_call(self, *args, **kwargs):
        _state.in_grid, _state.languages = True, None
        try:
            return run_grid(self, *args, **kwargs)
        finally:
            _state.in_grid, _state.languages = False, None

    _originals.update(patch_lang=patch_lang, run_grid=run_grid)
    interpreter._patch_lang = patch_once
    grid.__call__ = grid_call
    reduce_ops = getattr(interpreter, "ReduceOps", None)
    if reduce_ops is not None and hasattr(reduce_ops, "apply_impl"):
        reduce_all = reduce_ops.apply_impl

        def apply_impl(self, input):
            ufunc = _ufuncs.get(self.combine_fn)
            if ufunc is None or len(input) != 1:
                return reduce_all(self, input)
            data = input[0].handle.data
            out = ufunc.reduce(data, axis=self.axis, keepdims=self.keep_dims)
            return self.to_tensor(out, input[0].dtype)

        _originals["reduce_all"] = reduce_all
        reduce_ops.apply_impl = apply_impl
    return True


@contextlib.contextmanager
def interpreter_as_shipped():
    """Runs its block with the interpreter's own patching (for the test comparing the two)."""
    from triton.runtime import interpreter

    if not _originals:
        yield
        return
    ours = (interpreter._patch_lang, interpreter.GridExecutor.__call__,
            interpreter.ReduceOps.apply_impl)
    interpreter._patch_lang = _originals["patch_lang"]
    interpreter.GridExecutor.__call__ = _originals["run_grid"]
    interpreter.ReduceOps.apply_impl = _originals.get("reduce_all", ours[2])
    try:
        yield
    finally:
        (interpreter._patch_lang, interpreter.GridExecutor.__call__,
         interpreter.ReduceOps.apply_impl) = ours
