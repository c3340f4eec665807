"""Which release of each vendor package the adapters judge is installed here: the environment
lines a run records (``release of <vendor>``) and the conformance matrix reads back."""

from __future__ import annotations

import functools
import importlib.metadata

RELEASE_KEY = "release of {}"
"""The environment key a run records each vendor package's version under (``releases``)."""


def adapters():
    from harness.adapters import ADAPTERS, ADAPTER_MODULES

    return [ADAPTERS.get(name) for name in ADAPTER_MODULES]


@functools.lru_cache(maxsize=1)
def _distributions() -> dict[str, list[str]]:
    return importlib.metadata.packages_distributions()


def distribution(package: str) -> str | None:
    """The installed distribution that provides import package ``package`` (``sglang``, or
    ``amd-aiter`` for ``aiter``), or None."""
    names = _distributions().get(package, [])
    return names[0] if names else None


def releases() -> dict[str, str]:
    """Environment lines: ``release of <vendor>`` -> ``<distribution> <version>`` or ``absent``,
    for every adapter's package."""
    out = {}
    for adapter in adapters():
        dist = distribution(adapter.package)
        out[RELEASE_KEY.format(adapter.name)] = (
            f"{dist} {importlib.metadata.version(dist)}" if dist else "absent")
    return out
