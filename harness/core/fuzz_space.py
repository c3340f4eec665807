"""What the fuzzer may draw for an op: one domain per case parameter, declared beside the op's
input space (``OpSpec.fuzz_space``).

The input space names the cells a fixed sweep must reach; a fuzz space spans them and everything
between, so values are combined freely instead of only on the grid. Domains are plain data: the
fuzzer (``harness.fuzz``) turns them into Hypothesis strategies. Each domain lists its simplest
value first, which is where shrinking goes: the smallest size, the first choice.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Mapping


@dataclasses.dataclass(frozen=True)
class Sizes:
    """An integer in ``[lo, hi]``, drawn log-uniformly, with ``edges`` (tile sizes, dispatch
    thresholds, 2^k +- 1) drawn often: the values where slicing bugs live."""
    lo: int
    hi: int
    edges: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if self.lo > self.hi:
            raise ValueError(f"Sizes({self.lo}, {self.hi}): lo must be <= hi")

    def reachable(self) -> tuple[int, int]:
        return self.lo, self.hi


@dataclasses.dataclass(frozen=True)
class Choice:
    """One of ``values``, the first the simplest. ``on_cpu``: the values allowed on a CPU device
    where the others need a GPU (a 2 GB cache, say); None: all of them."""
    values: tuple[Any, ...]
    on_cpu: tuple[Any, ...] | None = None

    def __post_init__(self) -> None:
        if not self.values:
            raise ValueError("Choice needs at least one value")


def flag(on_cpu: bool = True) -> Choice:
    """False, then True (True only on a GPU when ``on_cpu`` is False)."""
    return Choice((False, True), None if on_cpu else (False,))


Domain = Sizes | Choice


def context_holds_drafts(values: dict) -> dict:
    """A decode request's context holds at least its ``next_n`` draft tokens."""
    return {**values, "context": max(values["context"], values.get("next_n", 1))}


@dataclasses.dataclass(frozen=True)
class FuzzSpace:
    """Domains for ``tokens``, ``hidden`` and the spec's case parameters. ``requests``: the
    parameter that counts decode requests (``batch``); the case's rows are then ``batch`` x
    ``next_n``. ``shrink_to_fit``: the size parameters halved, in this order, while a drawn case
    is larger than the run allows (``OpSpec.case_elements``)."""
    domains: Mapping[str, Domain]
    requests: str | None = None
    shrink_to_fit: tuple[str, ...] = ("tokens",)
    adjust: Callable[[dict], dict] | None = None
    """Ties between parameters a draw must respect (e.g. no more empty requests than requests)."""
    cost: Callable[[dict], int] | None = None
    """The work of a drawn case in elements, where ``OpSpec.case_elements`` (its memory)
    understates it (e.g. logits x heads); the run's cap applies to this."""

    def __post_init__(self) -> None:
        for name in self.shrink_to_fit:
            if not isinstance(self.domains.get(name), Sizes):
                raise ValueError(f"shrink_to_fit names {name!r}, which has no Sizes domain")
