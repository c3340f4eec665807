"""Accuracy and regression harness for LLM inference kernels (DeepSeek-V4/V3.2 ops).

The public face: what a plugin module or a script needs, importable from ``harness``::

    from harness import register, KnownDeviation, CostLimit

    @register("mhc_post", "mybuild")
    def mhc_post(x, residual, post_layer_mix, comb_res_mix): ...

Names load on first use (``import harness`` stays light). Importing any part of the package
installs ``harness.families.load`` as the registry's loader, so the first question to the
registry (``records``, ``get_spec``) collects the kernel families and the vendor adapters; the
core (``harness.core``) itself names no family.
"""

import importlib

from harness import families  # noqa: F401  (installs the registry's loader; imports no kernels)

__version__ = "0.1.0"

_FACE = {
    "register": "harness.core.registry", "register_unavailable": "harness.core.registry",
    "Implementation": "harness.core.registry", "KnownDeviation": "harness.core.registry",
    "KnownDeviationSeen": "harness.core.registry", "CostLimit": "harness.core.registry",
    "Unsupported": "harness.core.registry", "records": "harness.core.registry",
    "Case": "harness.core.cases", "get_spec": "harness.core.specs",
    "ContractError": "harness.core.errors", "ContractViolation": "harness.core.errors",
    "register_out_of_memory_error": "harness.core.errors",
    "raise_pending": "kernels.runtime.deferred",
    "evaluate": "harness.evaluate", "Evaluation": "harness.evaluate",
}
__all__ = sorted(_FACE) + ["__version__"]


def __getattr__(name: str):
    if name in _FACE:
        return getattr(importlib.import_module(_FACE[name]), name)
    raise AttributeError(f"module 'harness' has no attribute {name!r}; its public names: "
                         f"{', '.join(__all__)}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
