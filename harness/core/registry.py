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
import math
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

MEANINGLESS_AT = {
    "mismatch_frac": (1.0, "the share of elements that differ: 1.0 is every element wrong"),
    "max_rel": (1.0, "a relative error: 1.0 is what an output of zeros shows"),
    "p50": (1.0, "a per-token relative error: 1.0 is what an output of zeros shows"),
    "p99": (1.0, "a per-token relative error: 1.0 is what an output of zeros shows"),
    "max": (1.0, "a per-token relative error: 1.0 is what an output of zeros shows"),
    "misrounded": (1.0, "the share of elements not correctly rounded: 1.0 is all of them"),
}
"""Measure -> (the value from which a bound admits any output, what the measure is): a
deviation's bound must stay below it."""
NOT_BOUNDS = {
    "cosine": "a similarity (higher is better), not an error a bound can cap",
    "nan_count": "NaN is never a documented difference (covers() rejects any)",
    "nonfinite_mismatch": "a wrong inf/NaN pattern is never a documented difference",
}


def check_bounds(reason: str, bounds: Mapping[str, float]) -> None:
    """A known deviation's bounds must each exclude something: finite, not negative, below the
    value at which the measure admits any output (``MEANINGLESS_AT``), on a measure that is an
    error (``NOT_BOUNDS``)."""
    what = f"known deviation {reason[:60]!r}"
    for measure, bound in bounds.items():
        if measure in NOT_BOUNDS:
            raise RegistryError(f"{what}: {measure} cannot bound a deviation ({NOT_BOUNDS[measure]}); "
                                "bound an error measure such as max_rel or max_abs")
        if isinstance(bound, bool) or not isinstance(bound, (int, float)) \
                or not math.isfinite(bound) or bound < 0:
            raise RegistryError(f"{what}: bound {measure}={bound!r} is not a finite number >= 0; "
                                "give the largest value the documented difference shows, with "
                                "its margin")
        limit, meaning = MEANINGLESS_AT.get(measure, (math.inf, ""))
        if bound >= limit:
            raise RegistryError(
                f"{what}: bound {measure}={bound!r} admits any output ({meaning}), so the "
                f"deviation would cover every failure. Measure the real difference on the "
                f"implementation and bound it with a stated margin, below {limit:g}; a case it "
                "cannot compute at all is Unsupported (with a guard test), not a deviation")


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
        if not self.reason:
            raise RegistryError("a known deviation needs a reason: what differs from the contract "
                                "and why (the report prints it beside every covered case)")
        if not self.bounds:
            raise RegistryError(f"known deviation {self.reason[:60]!r} has no bounds: give the "
                                "largest error it may show, e.g. bounds={'max_rel': 2 ** -7}, "
                                "so that a worse failure is still a failure")
        check_bounds(self.reason, self.bounds)

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

    def __post_init__(self) -> None:
        if not self.reason or not callable(self.when):
            raise RegistryError(f"Unsupported({self.reason[:60]!r}) needs a reason and a callable "
                                "`when` selecting the cases it cannot handle")

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

    def __post_init__(self) -> None:
        if isinstance(self.elements, bool) or not isinstance(self.elements, int) \
                or self.elements < MIN_COST_LIMIT_ELEMENTS:
            raise RegistryError(
                f"CostLimit({self.elements!r}): a cost limit below {MIN_COST_LIMIT_ELEMENTS} "
                "elements (a 16-token x 4096-wide case) skips the small cases every "
                "implementation runs in well under a second, so it declares the implementation "
                "unjudged rather than slow. Give the largest case it runs in reasonable time "
                "(an int), declare the inputs it cannot handle Unsupported, or register it "
                "unavailable with the reason")
        if not self.reason:
            raise RegistryError(f"CostLimit({self.elements}) needs a reason: why larger cases "
                                "cost too much to run")


MIN_COST_LIMIT_ELEMENTS = 2 ** 16
"""The smallest ``CostLimit.elements`` accepted (see ``CostLimit``)."""


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

    @property
    def origin(self) -> str:
        """Where the implementation comes from: ``shipped`` (the harness's kernels/),
        ``vendor`` (an adapter of a vendor package) or ``module`` (anything else: a user's
        ``--impl-module``, a test's stand-in)."""
        source = self.source or ""
        if source.startswith("kernels."):
            return "shipped"
        return "vendor" if source.startswith("harness.adapters") else "module"

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
