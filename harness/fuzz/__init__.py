"""Budgeted fuzzing over each op's declared fuzz space (``harness fuzz``): Hypothesis draws the
cases, the suites' comparison and per-case detectors judge them, failures shrink to a minimal
case saved for ``harness replay``."""

from harness.fuzz.run import Options, Target, fault_targets, implementation_targets, run_targets
from harness.fuzz.search import Found, Search, search

__all__ = ["Found", "Options", "Search", "Target", "fault_targets", "implementation_targets",
           "run_targets", "search"]
