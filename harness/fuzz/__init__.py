"""Budgeted fuzzing over each op's declared fuzz space (``harness fuzz``): Hypothesis draws the
cases, the suites' comparison and per-case detectors judge them, failures shrink to a minimal
case saved for ``harness replay``.

Names load on first use, so the CLI can list ``harness fuzz`` without importing Hypothesis
(imported before pytest starts, its pytest plugin could not be assertion-rewritten).
"""

import importlib

_FACE = {"Options": "harness.fuzz.run", "Target": "harness.fuzz.run",
         "fault_targets": "harness.fuzz.run", "implementation_targets": "harness.fuzz.run",
         "run_targets": "harness.fuzz.run", "Found": "harness.fuzz.search",
         "Search": "harness.fuzz.search"}
"""``search`` itself is ``harness.fuzz.search.search``: a package attribute of that name would be
the submodule once it is imported."""
__all__ = sorted(_FACE)


def __getattr__(name: str):
    if name in _FACE:
        return getattr(importlib.import_module(_FACE[name]), name)
    raise AttributeError(f"module 'harness.fuzz' has no attribute {name!r}")
