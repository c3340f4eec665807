"""The sweep: suites declare what they sweep, and this module expands it from the active profile.

For example::

    OPS = MHC_OPS                                   # module constant: ops under test

    @pytest.mark.sweep("tokens", "hidden", "seed")  # axes taken from the profile
    def test_matches_reference(target): ...

    @pytest.mark.sweep(hidden="profile", tokens=[7, 257])   # explicit values for an axis
    def test_poison(target): ...

    @pytest.mark.sweep(ops=["top_k_per_row_decode"], top_k={"smoke": [16], "default": [2048]})
    def test_decode(target): ...     # other keywords become Case.params; a dict maps profiles

A keyword must be a case parameter that a swept op's spec declares (``OpSpec.case_params``);
each op's cases carry the ones it declares, and a name none declares is a usage error.


Each generated test gets a :class:`Target` (spec, implementation, case) with an id like
``mhc_pre-T4099-H7168-triton``. Implementations that cannot run here (a vendor package that is
not installed) are left out of the sweep and listed, with the registry's reason, under "Not run
here" in the report; one named with ``--impl`` is collected as a skip carrying that reason.
"""

from __future__ import annotations

import dataclasses
import itertools

import pytest

from harness.core import device as harness_device, layouts
from harness.core.cases import Case
from harness.core.registry import Implementation, records
from harness.core.specs import OpSpec, get_spec
from harness.profiles import (COMPOSED_INTERPRETER_MAX_TOKENS, INTERPRETER_MAX_ELEMENTS,
                              INTERPRETER_MAX_TOKENS, Profile, runs_for)
from harness.pytest_plugin.context import run_profile, selection

AXES = ("tokens", "hidden", "seed")


@dataclasses.dataclass(frozen=True)
class Target:
    spec: OpSpec
    impl: Implementation
    case: Case
    profile: Profile
    not_judged: str = ""
    """Why the sweep skips this case (a ``SKIP_KINDS`` entry), "" when it is judged."""

    @property
    def op(self) -> str:
        return self.spec.op

    def runs(self, case: Case | None = None) -> int:
        """How many times the accuracy suites run ``case`` (default: the target's own); cases a
        known deviation covers too, since a deviation documents a wrong value, not a race."""
        return runs_for(self.profile, (case or self.case).id)


def _values(profile: Profile, axis: str, spec) -> tuple:
    """``"profile"``: the profile's own axis; ``"smallest"``: its smallest value;
    ``"dispatch"``: the profile's dispatch_tokens; a dict: values per profile name (key
    ``"default"`` for the rest); else the literal values."""
    if spec in ("profile", "smallest"):
        values = {"tokens": profile.tokens, "hidden": profile.hidden, "seed": profile.seeds}[axis]
        return values if spec == "profile" else (min(values),)
    if spec == "dispatch":
        return profile.dispatch_tokens
    if isinstance(spec, dict):
        spec = spec.get(profile.name, spec.get("default", ()))
    return tuple(spec)


LARGE_CASE_ELEMENTS = 2 ** 27
"""Cases whose rows x width reach this many elements need tens of GB for their float64
reference. They carry the ``device_memory_heavy`` marker: on a GPU, a heavy test runs with the
GPU to itself (harness.pytest_plugin.gpu_memory), so that tests cannot exhaust one GPU's memory together (an
out-of-memory failure makes the run "could not test")."""


def _memory_marks(spec: OpSpec, case: Case, profile: Profile) -> list:
    """A test swept without a token axis may use any token count of its profile (the
    precision-growth test runs them all): unless its spec can size the case from its other
    parameters, it is judged by the profile's largest."""
    elements = spec.case_elements(case)
    if elements is None:
        elements = spec.case_elements(case.with_tokens(max(profile.tokens)))
    return [pytest.mark.device_memory_heavy] if elements >= LARGE_CASE_ELEMENTS else []


SKIP_KINDS = ("declared", "cost", "interpreter", "device", "other")
"""Why a sweep case was not judged: the implementation's ``Unsupported`` (declared) or its
``CostLimit`` (cost), the CPU's Triton interpreter limits (interpreter), a GPU-only test without
a GPU (device), or a skip inside the test (other: a check that does not apply to it).
``declared`` and ``cost`` are the implementation's own choice: the share a profile lets them
skip is ``Profile.max_declared_skip_share``."""
DECLARED_SKIPS = ("declared", "cost")


def _interpreted_skip(impl: Implementation, why: str, where: str) -> tuple[str, str]:
    return ("interpreter", f"{impl.name} launches Triton kernels, which the CPU runs under the "
            f"interpreter ({why}); {where}")


def _not_judged(spec: OpSpec, impl: Implementation, case: Case) -> tuple[str, str] | None:
    """(kind, reason) for a case beyond what ``impl`` is run at (see ``SKIP_KINDS``): Triton
    kernels under the CPU interpreter, the implementation's declared ``unsupported`` inputs and
    ``cost_limit``; None when it is judged."""
    interpreted = impl.triton and harness_device.triton_interpreted()
    elements = spec.case_elements(case)
    if interpreted and (case.tokens or 0) > INTERPRETER_MAX_TOKENS:
        return _interpreted_skip(impl, f"minutes at T={case.tokens}",
                                 f"Triton kernels stop at T={INTERPRETER_MAX_TOKENS} on a CPU and "
                                 "are run at every token count on a GPU (--profile ci/nightly)")
    if interpreted and elements is not None and elements > INTERPRETER_MAX_ELEMENTS:
        return _interpreted_skip(impl, f"minutes for {elements} elements",
                                 f"on a CPU they stop at {INTERPRETER_MAX_ELEMENTS} elements, "
                                 "torch paths and user modules run this size here, and Triton "
                                 "kernels run it on a GPU (--profile ci/nightly)")
    blind = interpreted and layouts.interpreter_blind(case)
    if blind:
        return _interpreted_skip(impl, f"layout {case.param(layouts.PARAM)}: {blind}",
                                 "torch paths and user modules are judged on it here, and "
                                 "Triton kernels on a GPU (--profile ci/nightly)")
    composition = impl.declared.get("composition")
    small = 0 < (case.tokens or 0) <= COMPOSED_INTERPRETER_MAX_TOKENS
    if interpreted and composition and not small:
        return _interpreted_skip(impl, f"it is {composition}, whose parts this run judges at "
                                 "every token count", "the composition is judged here up to "
                                 f"T={COMPOSED_INTERPRETER_MAX_TOKENS} and at every size on a "
                                 "GPU (profiles.COMPOSED_INTERPRETER_MAX_TOKENS)")
    unsupported = impl.unsupported_for(case)
    if unsupported:
        return ("declared", f"{impl.name}/{case.op} is documented not to handle this case, so "
                f"it is not judged here: {unsupported[0].reason}")
    limit = impl.cost_limit
    if limit is not None and elements is not None and elements > limit.elements:
        return ("cost", f"{impl.name}/{case.op} runs cases up to {limit.elements} elements, "
                f"this one has {elements}: {limit.reason}")
    return None


def _cost_marks(spec: OpSpec, impl: Implementation, case: Case) -> list:
    """Skips, with the reason, for cases beyond what ``impl`` is run at (``_not_judged``)."""
    skip = _not_judged(spec, impl, case)
    return [pytest.mark.skip(reason=skip[1])] if skip else []


def pytest_generate_tests(metafunc):
    if "target" not in metafunc.fixturenames:
        return
    config = metafunc.config
    profile = run_profile(config)
    chosen = selection(config)
    dev = chosen.device or harness_device.default_device()
    ops = getattr(metafunc.module, "OPS", None)
    if not ops:
        raise pytest.UsageError(f"{metafunc.module.__name__} uses `target` but sets no OPS")
    marker = metafunc.definition.get_closest_marker("sweep")
    axes = {a: "profile" for a in (marker.args if marker else AXES)}
    axes.update(marker.kwargs if marker else {})
    only_ops = axes.pop("ops", None)
    if only_ops:
        ops = [op for op in ops if op in only_ops]
    grid = {a: _values(profile, a, axes[a]) if a in axes else (None,) for a in AXES}
    extra = {a: _values(profile, a, v) for a, v in axes.items() if a not in AXES}
    undeclared = sorted(a for a in extra if not any(a in get_spec(op).case_params for op in ops))
    if undeclared:
        known = sorted({p for op in ops for p in get_spec(op).case_params})
        raise pytest.UsageError(
            f"{metafunc.definition.nodeid}: sweep axis {', '.join(undeclared)} is no case "
            f"parameter of {', '.join(ops)}; they take {', '.join(AXES + tuple(known))}")
    empty = sorted(a for a, v in {**grid, **extra}.items() if not v)
    if empty:
        metafunc.parametrize("target", [pytest.param(None, marks=pytest.mark.skip(
            reason=f"not in the {profile.name} profile: its sweep lists no {', '.join(empty)} "
                   "for it"))])
        return
    wanted = set(chosen.impls)
    params = []
    for op in ops:
        spec = get_spec(op)
        own = {a: v for a, v in extra.items() if a in spec.case_params}
        combos = [tuple(zip(own, vals)) for vals in itertools.product(*own.values())]
        for name, impl in sorted(records(op).items()):
            if wanted and name not in wanted:
                continue
            if not impl.available:
                if name in wanted:
                    params.append(pytest.param(None, id=f"{op}-{name}", marks=[
                        pytest.mark.skip(reason=f"{op}/{name} cannot run here: {impl.reason}"),
                        pytest.mark.implementation(name)]))
                continue
            for hidden, tokens, seed, combo in itertools.product(
                    grid["hidden"], grid["tokens"], grid["seed"], combos):
                case = Case(op, tokens=tokens or 0, hidden=hidden or 0, seed=seed or 0,
                            device=dev, params=combo)
                skip = _not_judged(spec, impl, case)
                marks = _memory_marks(spec, case, profile) + (
                    [pytest.mark.skip(reason=skip[1])] if skip else [])
                params.append(pytest.param(
                    Target(spec, impl, case, profile, skip[0] if skip else ""), marks=marks,
                    id=_test_id(op, name, tokens, hidden, seed, combo, len(grid["seed"]) > 1)))
    if not params:
        params = [pytest.param(None, marks=pytest.mark.skip(
            reason=f"no implementation of {ops} matches --impl {sorted(wanted)}"))]
    metafunc.parametrize("target", params)


def _test_id(op, impl, tokens, hidden, seed, params, several_seeds: bool) -> str:
    """``mhc_pre-T4099-H7168-triton``: op, the axes the test sweeps, case parameters, the seed
    when the profile has several, the implementation."""
    parts = [op] + ([f"T{tokens}"] if tokens is not None else []) + \
        ([f"H{hidden}"] if hidden is not None else []) + [f"{k}{v}" for k, v in params] + \
        ([f"s{seed}"] if seed is not None and several_seeds else []) + [impl]
    return "-".join(parts)
