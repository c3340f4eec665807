"""Which release of each vendor package the adapters judge is installed here: the environment
lines a run records (``release of <vendor>``) and the conformance matrix reads back."""

from __future__ import annotations

import functools
import importlib.metadata
import importlib.util

RELEASE_KEY = "release of {}"
"""The environment key a run records each vendor package's version under (``releases``)."""


def adapters():
    from harness.adapters import ADAPTERS, ADAPTER_MODULES

    return [ADAPTERS.get(name) for name in ADAPTER_MODULES]


@functools.lru_cache(maxsize=1)
def _distributions() -> dict[str, list[str]]:
    return importlib.metadata.packages_distributions()


def _provides(dist: importlib.metadata.Distribution, package: str) -> bool:
    top = dist.read_text("top_level.txt")
    if top is not None:
        return package in top.split()
    return any(f.parts[0] == package for f in dist.files or ())


def distribution(package: str, names: tuple[str, ...] = ()) -> str | None:
    """The installed distribution that provides import package ``package`` (``sglang``, or
    ``amd-aiter`` for ``aiter``), or None. A package that is not importable has none; one whose
    distribution is named like it or in ``names`` is read from that distribution alone; only
    the others need the scan of every installed distribution, which costs half a second."""
    try:
        if importlib.util.find_spec(package) is None:
            return None
    except (ImportError, ValueError):
        pass
    for name in dict.fromkeys((*names, package, package.replace("_", "-"))):
        try:
            dist = importlib.metadata.distribution(name)
        except importlib.metadata.PackageNotFoundError:
            continue
        if _provides(dist, package):
            return dist.metadata["Name"]
    names = _distributions().get(package, [])
    return names[0] if names else None


def releases() -> dict[str, str]:
    """Environment lines: ``release of <vendor>`` -> ``<distribution> <version>`` or ``absent``,
    for every adapter's package."""
    out = {}
    for adapter in adapters():
        dist = distribution(adapter.package, adapter.distributions)
        out[RELEASE_KEY.format(adapter.name)] = (
            f"{dist} {importlib.metadata.version(dist)}" if dist else "absent")
    return out
