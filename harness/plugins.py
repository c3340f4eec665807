"""Moved to :mod:`harness.impl_modules`; this path keeps working, with a DeprecationWarning."""

from harness.core.moved import alias

alias(__name__, "harness.impl_modules")
