"""Moved to :mod:`harness.cases.files`; this path keeps working, with a DeprecationWarning."""

from harness.core.moved import alias

alias(__name__, "harness.cases.files")
