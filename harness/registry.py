"""Deprecated home of ``register`` (the first release's ``from harness.registry import
register``): it keeps working, with a DeprecationWarning naming the new import."""

import warnings

from harness.core.registry import (CostLimit, Implementation, KnownDeviation,  # noqa: F401
                                   RegistryError, Unsupported, get, implementations, records,
                                   register, register_unavailable, unregister)

warnings.warn("harness.registry is deprecated: import from harness instead, e.g. "
              "`from harness import register, KnownDeviation, CostLimit`",
              DeprecationWarning, stacklevel=2)
