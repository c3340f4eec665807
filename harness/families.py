"""Collecting the kernel families: the engine's only way into ``kernels``.

``load()`` turns the Triton interpreter on where needed (before any ``@triton.jit`` runs),
imports the ``kernels`` package (every family registers its specs and implementations) and the
vendor adapters, and is installed as the registry's loader, so the first question to the
registry loads them. Nothing here names a family: a new ``kernels/<family>`` listed in
``kernels.FAMILIES`` is collected as it is.
"""

from __future__ import annotations

from harness.core import registry
from harness.core.faults import Fault
from harness.core.family import Family, Probe

_FAMILIES: tuple[Family, ...] | None = None


def load() -> tuple[Family, ...]:
    global _FAMILIES
    if _FAMILIES is None:
        from harness.core import device  # torch, only when kernels are wanted

        device.configure_triton()
        import kernels  # the engine's one import of the kernels (suites/test_import_layers.py)

        _FAMILIES = tuple(kernels.FAMILIES)
        from harness.adapters import load_all

        load_all()
        device.kernels_imported = True
    return _FAMILIES


def all_faults() -> list[Fault]:
    return [f for family in load() for f in family.seeded_faults()]


def probes() -> dict[str, Probe]:
    """Detector name -> probe, over every family."""
    return {probe.name: probe for family in load() for probe in family.probes}


registry.use_loader(load)
