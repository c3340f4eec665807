"""An op's input space: the value distributions, sizes, metadata, layouts and call sequences it is
judged on, as named cells of five axes, declared once in the op's spec (``OpSpec.input_space``).

A cell says which cases belong to it (``when``: case parameter -> the values, or a predicate,
that select it), what those inputs are and which bug they stand for, and in which profiles the
suites must reach it. Nothing here runs a case: the suites sweep, and the report counts the
judged cases of each cell from the result rows (``coverage``), so the table says what was
judged, what was skipped and why, and what a profile leaves out by design.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Iterable, Mapping

AXES = ("values", "sizes", "metadata", "layouts", "calls")
"""``layouts``: the views real callers pass (strided, sliced, offset); ``calls``: runs of calls
with the same shapes (state carried from one call to the next)."""
PROFILES = ("smoke", "ci", "nightly", "full")
GPU_PROFILES = ("ci", "nightly", "full")
CASE_FIELDS = ("tokens", "hidden")
"""Fields of every case a cell may select on, beside the spec's own case parameters."""

Condition = Any
"""A tuple (or list) of values, a single value, or a predicate ``value -> bool``."""


def _holds(condition: Condition, value: Any) -> bool:
    if callable(condition):
        return bool(condition(value))
    if isinstance(condition, (tuple, list, set, frozenset)):
        return value in condition
    return value == condition


@dataclasses.dataclass(frozen=True)
class Cell:
    axis: str
    name: str
    what: str
    """The inputs, and the upstream bug or kernel threshold they stand for."""
    when: Mapping[str, Condition] = dataclasses.field(default_factory=dict)
    """Case parameter (or ``tokens``/``hidden``) -> condition; every one must hold. Empty: every
    case of the op (the baseline cell of an axis)."""
    where: Callable[[Mapping[str, Any]], bool] | None = None
    """A condition on several values at once (e.g. rows x columns), beside ``when``."""
    profiles: tuple[str, ...] = PROFILES
    """Profiles whose sweep must judge at least one case of this cell."""
    elsewhere: str = ""
    """Why the other profiles leave it out (shown in their coverage table)."""

    def __post_init__(self) -> None:
        if self.axis not in AXES:
            raise ValueError(f"cell {self.name!r}: axis {self.axis!r} is not one of {AXES}")
        unknown = [p for p in self.profiles if p not in PROFILES]
        if unknown or not self.profiles:
            raise ValueError(f"cell {self.name!r}: profiles {self.profiles} must be among {PROFILES}")
        if set(self.profiles) != set(PROFILES) and not self.elsewhere:
            raise ValueError(f"cell {self.name!r} runs only in {', '.join(self.profiles)}: say "
                             "why the others leave it out (elsewhere=...)")

    def matches(self, values: Mapping[str, Any]) -> bool:
        return (all(_holds(cond, values.get(name)) for name, cond in self.when.items())
                and (self.where is None or bool(self.where(values))))


@dataclasses.dataclass(frozen=True)
class InputSpace:
    cells: tuple[Cell, ...] = ()

    def __post_init__(self) -> None:
        seen = set()
        for cell in self.cells:
            key = (cell.axis, cell.name)
            if key in seen:
                raise ValueError(f"input space names {cell.axis}/{cell.name} twice")
            seen.add(key)

    def check_against(self, op: str, case_params: Iterable[str]) -> None:
        """Refuse a cell that selects on a name the op's cases do not carry (a typo would make
        the cell match nothing, or everything)."""
        known = set(case_params) | set(CASE_FIELDS)
        for cell in self.cells:
            bad = sorted(set(cell.when) - known)
            if bad:
                raise ValueError(f"{op}: input-space cell {cell.axis}/{cell.name} selects on "
                                 f"{', '.join(bad)}, which no case of {op} carries; it takes "
                                 f"{', '.join(sorted(known))}")

    def cells_of(self, values: Mapping[str, Any]) -> list[Cell]:
        return [cell for cell in self.cells if cell.matches(values)]

    def expected_in(self, profile: str) -> list[Cell]:
        return [cell for cell in self.cells if profile in cell.profiles]


def case_values(defaults: Mapping[str, Any], tokens: Any, hidden: Any,
                params: Mapping[str, Any]) -> dict[str, Any]:
    """What a cell is matched against: the spec's defaults, overridden by the case's fields and
    parameters."""
    return {**defaults, "tokens": tokens, "hidden": hidden, **params}


def at_least(n: int) -> Callable[[Any], bool]:
    return lambda v: v is not None and int(v) >= n


def between(lo: int, hi: int) -> Callable[[Any], bool]:
    """``lo <= v <= hi``."""
    return lambda v: v is not None and lo <= int(v) <= hi


def one_of_base(*names: str, suffix: str = "-nan") -> Callable[[Any], bool]:
    """A ``data`` value whose base (without ``suffix``) is one of ``names``."""
    return lambda v: isinstance(v, str) and v.removesuffix(suffix) in names


def ends_with(suffix: str) -> Callable[[Any], bool]:
    return lambda v: isinstance(v, str) and v.endswith(suffix)
