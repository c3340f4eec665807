"""AITER's Triton modules from the installed ``amd-aiter``, without running ``aiter/__init__.py``.

``import aiter`` works on ROCm only: the package's ``__init__`` runs ``hipconfig --version``
(``aiter/jit/utils/cpp_extension.py``) and JIT-builds a HIP extension. The Triton modules under
``aiter/ops/triton/`` need none of that: they import torch, triton, their ``_triton_kernels`` and
``aiter.dtypes`` (``aiter/utility/dtypes.py``), which asks ``aiter.jit.utils.chip_info.get_gfx()``
which fp8 type the GPU has; the real ``chip_info`` imports ``cpp_extension`` and so needs ROCm.

``load`` imports the named modules under an ``aiter`` package object whose ``__path__`` is the
installed tree, with a ``chip_info`` that answers ``GFX``, and then takes every ``aiter`` name
out of ``sys.modules`` again (restoring what was there), so that ``import aiter`` elsewhere
(vLLM's probe for AITER, the ROCm adapter ``harness.adapters.aiter``) sees the machine as it is.
The loaded modules keep working: their kernels and helpers are bound through their globals.
Where the real package is already imported (a ROCm host), its modules are used as they are.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.machinery
import importlib.metadata
import importlib.util
import pathlib
import sys
import types

DISTRIBUTION = "amd-aiter"
"""PyPI's name for AMD's release of ROCm/aiter (the package named ``aiter`` is unrelated)."""
GFX = "gfx950"
"""The seeds' GPU, MI355X: AITER's fp8 type there is ``float8_e4m3fn``, the contract's (gfx942
would give ``float8_e4m3fnuz``, another encoding of the same bytes)."""
INSTALL_HINT = ("bash scripts/install.sh installs it (pip install --no-deps "
                "amd-aiter==0.1.7.post2.dev18); not the unrelated PyPI package named 'aiter'")


class AiterNotInstalled(ImportError):
    """``amd-aiter`` is absent, or its tree has no Triton modules; the message says what to do."""


def installed_tree() -> tuple[pathlib.Path, str]:
    """(the installed ``aiter`` directory, the distribution's version)."""
    try:
        dist = importlib.metadata.distribution(DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError as exc:
        raise AiterNotInstalled(f"{DISTRIBUTION} is not installed; {INSTALL_HINT}") from exc
    tree = pathlib.Path(dist.locate_file("aiter"))
    if not (tree / "ops" / "triton").is_dir():
        raise AiterNotInstalled(f"{DISTRIBUTION} {dist.version} at {tree} has no ops/triton "
                                f"directory; {INSTALL_HINT}")
    return tree, dist.version


def _package(name: str, path: pathlib.Path) -> types.ModuleType:
    """A package module for ``path`` whose ``__init__.py`` is not run."""
    spec = importlib.machinery.ModuleSpec(name, None, is_package=True)
    spec.submodule_search_locations = [str(path)]
    return importlib.util.module_from_spec(spec)


def _chip_info() -> types.ModuleType:
    module = types.ModuleType("aiter.jit.utils.chip_info",
                              f"harness stand-in for AITER's chip_info: the GPU is {GFX}")
    module.get_gfx = lambda: GFX
    return module


def _ours(name: str) -> bool:
    return name == "aiter" or name.startswith("aiter.")


@contextlib.contextmanager
def _borrowed_aiter_names(tree: pathlib.Path):
    """``aiter`` in ``sys.modules`` as a package of ``tree`` (with ``aiter.dtypes``) while the
    block runs; afterwards ``sys.modules`` holds the ``aiter`` names it held before."""
    saved = {name: module for name, module in sys.modules.items() if _ours(name)}
    for name in saved:
        del sys.modules[name]
    root = _package("aiter", tree)
    jit = _package("aiter.jit", tree / "jit")
    utils = _package("aiter.jit.utils", tree / "jit" / "utils")
    chip_info = _chip_info()
    root.jit, jit.utils, utils.chip_info = jit, utils, chip_info
    sys.modules.update({m.__name__: m for m in (root, jit, utils, chip_info)})
    try:
        root.dtypes = importlib.import_module("aiter.utility.dtypes")
        yield
    finally:
        for name in [n for n in sys.modules if _ours(n)]:
            del sys.modules[name]
        sys.modules.update(saved)


def _real_aiter_imported() -> bool:
    module = sys.modules.get("aiter")
    return module is not None and getattr(module, "__file__", None) is not None


def load(module_names: tuple[str, ...]) -> tuple[dict[str, types.ModuleType | str], str]:
    """({module name: the module, or why it does not import}, the amd-aiter version).

    Raises :class:`AiterNotInstalled` when the distribution is absent."""
    tree, version = installed_tree()
    loaded: dict[str, types.ModuleType | str] = {}
    scope = contextlib.nullcontext() if _real_aiter_imported() else _borrowed_aiter_names(tree)
    with scope:
        for name in module_names:
            try:
                loaded[name] = importlib.import_module(name)
            except Exception as exc:  # ImportError, or a module-level probe failing here
                loaded[name] = (f"{name} does not import from {DISTRIBUTION} {version} "
                                f"({type(exc).__name__}: {str(exc).splitlines()[0][:160]})")
    return loaded, version
