"""Moved to :mod:`harness.reports.summary`; this path keeps working, with a DeprecationWarning."""

from harness.core.moved import alias

alias(__name__, "harness.reports.summary")
