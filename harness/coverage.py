"""Moved to :mod:`harness.reports.coverage`; this path keeps working, with a DeprecationWarning."""

from harness.core.moved import alias

alias(__name__, "harness.reports.coverage")
