"""Accuracy and regression harness for LLM inference kernels (DeepSeek-V4/V3.2 ops).

Importing any part of it installs ``harness.families.load`` as the registry's loader, so the
first question to the registry (``records``, ``get_spec``) collects the kernel families and the
vendor adapters, from a suite, the CLI, a benchmark or a user's module alike. The core
(``harness.core``) itself names no family."""

from harness import families  # noqa: F401  (installs the registry's loader; imports no kernels)

__version__ = "0.1.0"
