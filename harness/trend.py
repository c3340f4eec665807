"""Moved to :mod:`harness.reports.trend`; this path keeps working, with a DeprecationWarning."""

from harness.core.moved import alias

alias(__name__, "harness.reports.trend")
