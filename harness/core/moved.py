"""Old import paths of modules that moved: each old module file calls :func:`alias`, so
``import harness.report`` (say) keeps working and warns, naming the new path."""

from __future__ import annotations

import importlib
import sys
import warnings


def alias(old: str, new: str) -> None:
    """Make the module being imported as ``old`` the module ``new``, with a DeprecationWarning."""
    warnings.warn(f"{old} is deprecated: it moved to {new}; import it from there",
                  DeprecationWarning, stacklevel=3)
    sys.modules[old] = importlib.import_module(new)
