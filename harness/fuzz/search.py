"""The search for one (op, implementation): Hypothesis draws cases from the op's fuzz space, the
judge runs each, and every distinct failure (check, output, kind) is shrunk while that same
failure holds.

Hypothesis has no time budget, so the search runs in rounds of a few examples, each with its own
derived seed (the same seed and build draw the same cases), until the budget or the example
count is spent. Each failure raises an exception class of its own, so Hypothesis keeps apart two
bugs found together and shrinks each one without sliding into the other; a failure already
found is not raised again in later rounds, so they look for new ones. Shrinking may run past the
budget by a quarter of it (and 5 s): past that, the smallest case found so far is the result.
"""

from __future__ import annotations

import collections
import dataclasses
import pathlib
import time

from hypothesis import HealthCheck, Phase, Verbosity, given, reject, seed as seed_of, settings
from hypothesis.database import DirectoryBasedExampleDatabase

from harness.core.registry import Implementation
from harness.core.specs import OpSpec
from harness.fuzz.judge import Failure, Judge, Unjudgeable
from harness.fuzz.strategies import cases

ROUND_EXAMPLES = 20


@dataclasses.dataclass
class Found:
    failure: Failure
    """The smallest failing case of this signature (the last one the shrinker kept)."""
    seconds_to_find: float
    examples_to_find: int
    shrinks: int = 0


@dataclasses.dataclass
class Search:
    op: str
    impl: str
    examples: int = 0
    discarded: collections.Counter = dataclasses.field(default_factory=collections.Counter)
    seconds: float = 0.0
    rounds: int = 0
    found: dict[tuple, Found] = dataclasses.field(default_factory=dict)
    error: str | None = None
    """The harness's own error that ended this search early (a bug to report, not a finding)."""
    drawn: list[str] = dataclasses.field(default_factory=list)
    """Ids of the judged cases, in order (what the same seed reproduces)."""


class _Clock:
    def __init__(self, seconds: float):
        self.start = time.monotonic()
        self.generate_until = self.start + seconds
        self.shrink_until = self.generate_until + 5.0 + 0.25 * seconds

    def elapsed(self) -> float:
        return time.monotonic() - self.start


_FAILURE_TYPES: dict[tuple, type] = {}


def _failure_type(signature: tuple) -> type:
    """One exception class per failure signature: Hypothesis tells bugs apart by it."""
    if signature not in _FAILURE_TYPES:
        _FAILURE_TYPES[signature] = type(f"FuzzFailure{len(_FAILURE_TYPES)}", (AssertionError,),
                                         {"signature": signature})
    return _FAILURE_TYPES[signature]


def _harness_error(exc: BaseException) -> str | None:
    """What went wrong in the harness itself, or None when ``exc`` (or every exception in a
    group) is a failure the judge raised."""
    parts = list(getattr(exc, "exceptions", None) or [exc])  # an exception group, or one
    for part in parts:
        if not hasattr(part, "signature") and not type(part).__name__.startswith("Flaky"):
            return f"{type(part).__name__}: {str(part).splitlines()[0][:300] if str(part) else ''}"
    return None


def search(spec: OpSpec, impl: Implementation, *, device: str, seconds: float,
           max_examples: int, seed: int, max_elements: int,
           database: pathlib.Path | None = None, runs: int = 2,
           stop_at_first: bool = False, detectors: tuple[str, ...] | None = None) -> Search:
    """``stop_at_first``: end after the round that found (and shrank) a failure, as the
    self-check of a seeded fault wants."""
    judge = Judge(spec, impl, device, runs=runs, detectors=detectors)
    result = Search(spec.op, impl.name)
    clock = _Clock(seconds)
    strategy = cases(spec, device, max_elements)
    db = DirectoryBasedExampleDatabase(str(database)) if database is not None else None
    state = {"shrinking": False, "known": set()}

    def test(case):
        now = time.monotonic()
        if now > clock.shrink_until or (now > clock.generate_until and not state["shrinking"]):
            return
        if result.examples >= max_examples and not state["shrinking"]:
            return
        try:
            failures = judge(case)
        except Unjudgeable as exc:
            result.discarded[str(exc)[:160]] += 1
            reject()
        result.examples += 1
        result.drawn.append(case.id)
        new = []
        for f in failures:
            entry = result.found.get(f.signature)
            if entry is None:
                result.found[f.signature] = Found(f, clock.elapsed(), result.examples)
            elif f.signature not in state["known"]:
                entry.failure, entry.shrinks = f, entry.shrinks + 1
            if f.signature not in state["known"]:
                new.append(f)
        if new:
            state["shrinking"] = True
            raise _failure_type(new[0].signature)(new[0].detail[:500])

    while (time.monotonic() < clock.generate_until and result.examples < max_examples):
        state["shrinking"], state["known"] = False, set(result.found)
        run = settings(max_examples=min(ROUND_EXAMPLES, max_examples - result.examples),
                       deadline=None, database=db, derandomize=False,
                       suppress_health_check=list(HealthCheck), verbosity=Verbosity.quiet,
                       phases=(Phase.explicit, Phase.reuse, Phase.generate, Phase.shrink),
                       report_multiple_bugs=True, print_blob=False)(
            seed_of(seed * 100_003 + result.rounds)(given(strategy)(test)))
        before = result.examples
        try:
            run()
        except Exception as exc:  # noqa: BLE001  (failures are recorded in ``result.found``)
            error = _harness_error(exc)
            if error is not None:
                result.error = error
                break
        result.rounds += 1
        if stop_at_first and result.found:
            break
        if result.examples == before and not state["shrinking"]:
            break  # every draw was discarded: the space offers this implementation nothing
    result.seconds = clock.elapsed()
    return result
