"""Moved to :mod:`harness.pytest_plugin.shards`; this path keeps working, with a DeprecationWarning."""

from harness.core.moved import alias

alias(__name__, "harness.pytest_plugin.shards")
