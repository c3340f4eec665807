"""An op's fuzz space (``OpSpec.fuzz_space``) as a Hypothesis strategy of cases.

Sizes are drawn log-uniformly (a bit length, then a value inside it) or, half the time, from the
domain's edges, and shrink to the smallest size that still fails; choices shrink to their first value; the seed
shrinks to 0. A case larger than the run allows is fitted by halving the space's
``shrink_to_fit`` sizes in order (rows first), not rejected: rejecting would waste most draws
of a log-uniform product.
"""

from __future__ import annotations

from typing import Any

from hypothesis import reject, strategies as st

from harness.core.cases import Case
from harness.core.fuzz_space import Choice, FuzzSpace, Sizes
from harness.core.specs import OpSpec

SEEDS = 2 ** 16


@st.composite
def _log_int(draw, lo: int, hi: int) -> int:
    if hi <= lo:
        return lo
    bits = draw(st.integers(0, (hi - lo).bit_length()))
    return lo + draw(st.integers(0, min(hi - lo, (1 << bits) - 1)))


@st.composite
def _size(draw, lo: int, hi: int, edges: tuple[int, ...]) -> int:
    """A free log-uniform draw, or one of ``edges`` when the flag drawn before it says so. The
    free value is drawn either way, so the shrinker can drop the flag and keep a failing case
    on the free value, then minimise that (a value drawn from the edges alone would shrink only
    to the smallest edge that still fails)."""
    free = draw(_log_int(lo, hi))
    if edges and draw(st.booleans()):
        return draw(st.sampled_from(edges))
    return free


def domain_strategy(domain, on_gpu: bool) -> st.SearchStrategy:
    if isinstance(domain, Sizes):
        edges = tuple(sorted({e for e in domain.edges if domain.lo <= e <= domain.hi}))
        return _size(domain.lo, domain.hi, edges)
    if isinstance(domain, Choice):
        values = domain.values if on_gpu or domain.on_cpu is None else domain.on_cpu
        return st.sampled_from(values)
    raise TypeError(f"unknown fuzz domain {domain!r}")


def _settle(space: FuzzSpace, values: dict) -> dict:
    """Rows from requests, and the space's ties between parameters."""
    if space.adjust is not None:
        values = space.adjust(values)
    if space.requests is not None:
        values["tokens"] = values[space.requests] * values.get("next_n", 1)
    return values


def fit(spec: OpSpec, space: FuzzSpace, values: dict, max_elements: int,
        case_of) -> dict | None:
    """``values`` with sizes halved until the case has at most ``max_elements`` (None when even
    the smallest sizes do not fit)."""
    def size(v: dict) -> int:
        return space.cost(v) if space.cost is not None else (spec.case_elements(case_of(v)) or 0)

    values = _settle(space, dict(values))
    for name in space.shrink_to_fit:
        lo = space.domains[name].lo
        while size(values) > max_elements and values[name] > lo:
            values[name] = max(lo, values[name] // 2)
            values = _settle(space, values)
    return values if size(values) <= max_elements else None


def case_from(spec: OpSpec, values: dict, seed: int, device: str) -> Case:
    """The case of drawn ``values``: only the parameters that differ from the spec's defaults
    are named, so its id reads as what was drawn."""
    params = tuple((k, v) for k, v in values.items()
                   if k not in ("tokens", "hidden") and spec.case_params.get(k) != v)
    return Case(spec.op, tokens=values.get("tokens", 0), hidden=values.get("hidden", 0),
                seed=seed, device=device, params=params)


def cases(spec: OpSpec, device: str, max_elements: int) -> st.SearchStrategy[Case]:
    space = spec.fuzz_space
    if space is None:
        raise ValueError(f"{spec.op} declares no fuzz space (OpSpec.fuzz_space)")
    on_gpu = str(device).startswith("cuda")
    parts = {name: domain_strategy(d, on_gpu) for name, d in space.domains.items()}

    @st.composite
    def draw_case(draw) -> Case:
        values: dict[str, Any] = {name: draw(s) for name, s in parts.items()}
        seed = draw(st.integers(0, SEEDS - 1))
        fitted = fit(spec, space, values, max_elements,
                     lambda v: case_from(spec, v, seed, device))
        if fitted is None:
            reject()
        return case_from(spec, fitted, seed, device)

    return draw_case()
