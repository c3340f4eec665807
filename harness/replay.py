"""Moved to :mod:`harness.cases.replay`; this path keeps working, with a DeprecationWarning."""

from harness.core.moved import alias

alias(__name__, "harness.cases.replay")
