"""Moved to :mod:`harness.reports.plots`; this path keeps working, with a DeprecationWarning."""

from harness.core.moved import alias

alias(__name__, "harness.reports.plots")
