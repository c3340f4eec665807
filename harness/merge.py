"""Moved to :mod:`harness.reports.merge`; this path keeps working, with a DeprecationWarning."""

from harness.core.moved import alias

alias(__name__, "harness.reports.merge")
