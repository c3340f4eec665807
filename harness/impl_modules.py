"""Loading external implementations: ``--impl-module`` and ``HARNESS_IMPL_MODULES``.

A module is a dotted name or a path to a ``.py`` file; importing it runs its ``register`` calls.
A module that fails to import is an error that names it, never a silent skip. Deprecation
warnings its import raises (an old ``from harness.registry import register``) are printed to
stderr naming the module, whatever warning filters the process or pytest release has.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import pathlib
import sys
import warnings

_LOADED: set[str] = set()


class ImplModuleError(RuntimeError):
    pass


def load_impl_module(spec: str) -> None:
    if spec in _LOADED:
        return
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", DeprecationWarning)
            _import(spec)
    finally:  # a deprecation note may be what explains a failed import
        _show(spec, caught)
    _LOADED.add(spec)


def _show(spec: str, caught: list) -> None:
    for warning in caught:
        if issubclass(warning.category, DeprecationWarning):
            print(f"note: --impl-module {spec}: {warning.category.__name__}: {warning.message}",
                  file=sys.stderr)
        else:
            warnings.warn_explicit(warning.message, warning.category, warning.filename,
                                   warning.lineno)


def _import(spec: str) -> None:
    path = pathlib.Path(spec)
    try:
        if spec.endswith(".py") or path.is_file():
            if not path.is_file():
                raise ImplModuleError(f"--impl-module {spec}: no such file")
            name = f"harness_ext_{path.stem}_{abs(hash(str(path.resolve()))) % 10**8}"
            mod_spec = importlib.util.spec_from_file_location(name, path)
            module = importlib.util.module_from_spec(mod_spec)
            sys.modules[name] = module
            mod_spec.loader.exec_module(module)
        else:
            importlib.import_module(spec)
    except ImplModuleError:
        raise
    except Exception as exc:
        raise ImplModuleError(
            f"--impl-module {spec} failed to import: {type(exc).__name__}: {exc}. Fix the module "
            "(run `python -c 'import ...'` on it) or drop the flag.") from exc


def load_impl_modules(specs: list[str], env: bool = True) -> None:
    from harness import families

    families.load()
    extra = [s for s in os.environ.get("HARNESS_IMPL_MODULES", "").split(os.pathsep) if s] if env else []
    for spec in list(specs) + extra:
        load_impl_module(spec)
