"""The one registry of implementations, keyed by op and implementation name.

Built-in implementations live in ``kernels/<family>/<backend>.py`` and register themselves on
import; external ones (vendor adapters, a user's build) register the same way from any module::

    from harness.core.registry import register

    @register("mhc_post", "mybuild")
    def mhc_post(x, residual, post_layer_mix, comb_res_mix): ...

Availability is decided at registration: an implementation that cannot run on this machine is
still recorded, with the reason, so reports can say what was not tested and why.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Mapping

from harness.core import ops
from harness.core.registries import Registry, RegistryError
from harness.core.ops import check_op

REFERENCE = "torch"



def _every_case(case) -> bool:
    return True


NEVER_COVERED_OUTPUTS = ("*", "guard", "inputs")
"""Rows no deviation may cover: an exception or contract violation (``*``), writes past the end of
an input, clobbered inputs."""


@dataclasses.dataclass(frozen=True)
class KnownDeviation:
    """A documented disagreement of a third-party implementation with the contract: on the cases
    ``when`` selects, a failing comparison of one of ``outputs`` whose measures stay within
    ``bounds`` (e.g. ``{"max_rel": 2 ** -7}``) is the documented difference, reported apart
    and never as a pass. Anything else still fails: a row of another output, beyond a bound,
    with NaN or a non-finite value where the reference differs (a wrong -inf mask), an exception,
    a write past an input's end or into an input, or a nondeterministic repeat.

    Covered cases are strict xfails expecting :class:`KnownDeviationSeen` alone: one that passes
    fails the run (a fixed upstream release is noticed), one that raises anything else fails."""
    reason: str
    when: Callable[[Any], bool] = _every_case
    bounds: Mapping[str, float] | None = None
    """Required: the largest value of each measure of a result row (``max_abs``, ``max_rel``,
    ``tol_used``, ``mismatch_frac``...) a covered failure may show, derived from the documented
    difference or measured on the real implementation, with the margin stated beside it."""
    outputs: tuple[str, ...] = ()
    """The outputs the deviation is about; empty: every output of the op."""

    def __post_init__(self) -> None:
        if not self.bounds:
            raise RegistryError(f"known deviation {self.reason[:60]!r} has no bounds: give the "
                                "largest error it may show, e.g. bounds={'max_rel': 2 ** -7}, "
                                "so that a worse failure is still a failure")

    def applies(self, case) -> bool:
        return bool(self.when(case))

    def covers(self, row: Mapping[str, Any]) -> bool:
        """Whether failing result row ``row`` is the documented difference."""
        if row.get("output") in NEVER_COVERED_OUTPUTS or row.get("check") == "determinism":
            return False
        if self.outputs and row.get("output") not in self.outputs:
            return False
        if row.get("nan_count") or row.get("nonfinite_mismatch"):
            return False
        for measure, bound in self.bounds.items():
            value = row.get(measure)
            if value is None or value != value or float(value) > bound:
                return False
        return True


class KnownDeviationSeen(Exception):
    """Raised by a judged case whose only failures are covered by a known deviation: the one
    outcome its strict xfail accepts."""


@dataclasses.dataclass(frozen=True)
class Unsupported:
    """Inputs a third-party implementation is documented to get wrong beyond any bound (it reads
    another memory layout, say): no known deviation can describe such output, so these cases
    are not judged. Each shows under "Not run here" with ``reason``, and the adapter's guard test
    must show the failure persists (so a fixed release is noticed and the entry removed)."""
    reason: str
    when: Callable[[Any], bool]

    def applies(self, case) -> bool:
        return bool(self.when(case))


@dataclasses.dataclass(frozen=True)
class CostLimit:
    """The largest case (rows x width, ``OpSpec.case_elements``) worth running an
    implementation on, with why: e.g. a vendor's torch fallback that loops in Python over every
    block of keys. Larger cases skip with ``reason``; the sweep still runs it on every smaller
    case of every other axis value, so its code paths stay judged."""
    elements: int
    reason: str


@dataclasses.dataclass(frozen=True)
class Implementation:
    op: str
    name: str
    fn: Callable | None
    available: bool = True
    reason: str = ""
    batch_invariant: bool = False
    """True when the implementation claims bitwise-identical rows whatever the rest of the batch."""
    knobs: Mapping[str, tuple] = dataclasses.field(default_factory=dict)
    """Keyword arguments whose values must not change the result beyond rounding (e.g. n_splits)."""
    source: str = ""
    accumulation: str = "fp32"
    """Declared accumulation precision of the op's long reductions: ``fp32``, ``tf32`` (the mHC
    GEMM on TF32 tensor cores) or ``fp8-mma`` (Hopper fp8 tensor cores keep ~14 bits in the
    accumulator). Outputs whose tolerance follows from accumulation error (the mHC mixes, the
    indexer logits) are judged by the declared class, and the report shows it."""
    known_deviations: tuple[KnownDeviation, ...] = ()
    declared: Mapping[str, str] = dataclasses.field(default_factory=dict)
    """Other declared properties a spec judges by, e.g. ``kv_layout: shuffle16`` (a K-cache writer
    that lays each block out in 16x16 tiles) or ``outside_window: unwritten`` (logits written
    only where visible). Each spec documents the ones it reads; the report shows them."""
    triton: bool = False
    """Launches Triton kernels: on a CPU they run under the interpreter, in numpy, one program
    at a time, so CPU profiles keep them to small token counts (profiles.INTERPRETER_MAX_TOKENS)."""
    cost_limit: CostLimit | None = None
    unsupported: tuple[Unsupported, ...] = ()

    def unsupported_for(self, case) -> list[Unsupported]:
        return [u for u in self.unsupported if u.applies(case)]

    def deviations_for(self, case) -> list[KnownDeviation]:
        """The known deviations that cover ``case``."""
        return [d for d in self.known_deviations if d.applies(case)]


_REGISTRY: dict[str, Registry[Implementation]] = {}
"""op -> its implementations by name."""
_LOADER: Callable[[], None] | None = None


def register(op: str, name: str, *, available: bool = True, reason: str = "",
             batch_invariant: bool = False, knobs: Mapping[str, tuple] | None = None,
             replace: bool = False, accumulation: str = "fp32",
             triton: bool = False,
             declared: Mapping[str, str] | None = None,
             known_deviations: tuple[KnownDeviation, ...] = (),
             cost_limit: CostLimit | None = None,
             unsupported: tuple[Unsupported, ...] = ()) -> Callable[[Callable], Callable]:
    """Decorator: record ``fn`` as implementation ``name`` of ``op``, with everything it
    declares about itself (the fields of :class:`Implementation`, which it is judged by).

    ``available=False`` with a ``reason`` records an implementation that cannot run here.
    Registering a name twice is an error unless ``replace=True``.
    """
    check_op(op)
    if not name or not name.replace("_", "").replace("-", "").replace(".", "").isalnum():
        raise RegistryError(f"implementation name {name!r} for {op} must be a non-empty "
                            "identifier (letters, digits, '_', '-', '.')")
    if not available and not reason:
        raise RegistryError(f"{op}/{name} is registered unavailable without a reason; "
                            "pass reason='why it cannot run and how to fix that'")

    def decorator(fn: Callable) -> Callable:
        add(Implementation(op=op, name=name, fn=fn, available=available, reason=reason,
                           batch_invariant=batch_invariant, knobs=dict(knobs or {}),
                           accumulation=accumulation, triton=triton,
                           declared=dict(declared or {}),
                           known_deviations=tuple(known_deviations), cost_limit=cost_limit,
                           unsupported=tuple(unsupported),
                           source=getattr(fn, "__module__", "")), replace=replace)
        return fn

    return decorator


def register_unavailable(op: str, name: str, reason: str) -> None:
    """Record an implementation that exists in principle but cannot run here (e.g. a vendor
    package that is not installed)."""
    add(Implementation(op=op, name=name, fn=None, available=False, reason=reason), replace=True)


def add(impl: Implementation, *, replace: bool = False) -> None:
    check_op(impl.op)
    named = _REGISTRY.setdefault(impl.op, Registry(f"implementation of {impl.op}"))
    old = dict(named.items()).get(impl.name)
    if old is not None and not replace and old.available:
        raise RegistryError(
            f"{impl.op}/{impl.name} is registered twice (by {old.source or '?'} and "
            f"{impl.source or '?'}); pick another name or pass replace=True")
    named.add(impl.name, impl, replace=True)


def unregister(op: str, name: str) -> None:
    if op in _REGISTRY:
        _REGISTRY[op].remove(name)


def use_loader(load: Callable[[], None]) -> None:
    """Install what fills the registry on first use: ``harness.families.load`` (the kernel
    families, the vendor adapters). The core itself knows no family."""
    global _LOADER
    _LOADER = load
    ops.use_loader(load)


def ensure_loaded() -> None:
    if _LOADER is None:
        raise RegistryError("no kernel families are loaded: import harness.families (the pytest "
                            "plugin and the CLI do) before asking the registry for an op")
    _LOADER()


def records(op: str) -> dict[str, Implementation]:
    """Every implementation of ``op``, available or not."""
    check_op(op)
    ensure_loaded()
    return dict(_REGISTRY[op].items()) if op in _REGISTRY else {}


def implementations(op: str) -> dict[str, Callable]:
    """The implementations of ``op`` that can run here, by name."""
    return {n: i.fn for n, i in records(op).items() if i.available}


def get(op: str, name: str) -> Implementation:
    impls = records(op)
    if name not in impls:
        known = ", ".join(sorted(impls)) or "none"
        raise RegistryError(f"no implementation {name!r} of {op}; registered: {known}. "
                            "Load extra ones with --impl-module.")
    return impls[name]


def unavailable() -> dict[tuple[str, str], str]:
    """(op, name) -> reason, for everything registered that cannot run here."""
    ensure_loaded()
    return {(op, n): i.reason for op, impls in _REGISTRY.items()
            for n, i in impls.items() if not i.available}
