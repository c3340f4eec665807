"""Call sequences: runs of calls with the same shapes and new values and metadata, as a decode
loop makes them (``calls`` axis of the input space; judged by harness.detectors.call_sequence).

A case's ``calls`` parameter names the run: ``one`` (a single call: every other suite), or
``<buffers>[-<order>]``. ``buffers``: ``new`` hands every call buffers of its own; ``refilled``
refills the first call's buffers in place (a decode loop's persistent inputs, a CUDA graph's
static ones), and the buffers an op writes in place (top-k's ``indices``, the K cache) keep what
the previous call left. ``order``, for ops whose calls carry context lengths: ``short-first``
(short, long, short) or ``long-first`` (long, short, long); each short call also turns rows that
were valid into padding where the op has padding (``Step.padded``). A spec says how one call of
the run differs from the first (``OpSpec.call_step``); everything else is generic.
"""

from __future__ import annotations

import dataclasses

from harness.core.input_space import Cell

PARAM = "calls"
ONE = "one"
BUFFERS = ("new", "refilled")
ORDERS = {"short-first": ("short", "long", "short"), "long-first": ("long", "short", "long")}
"""Short first is listed first: a value kept from the first call shows when a later call needs
more than the first did."""
UNORDERED = (None, None, None)
"""Three calls of new values, for ops without context lengths; the second one padded."""


@dataclasses.dataclass(frozen=True)
class Step:
    """Call ``index`` of a run: its context lengths (``long``, ``short``, or None where the op
    has none) and whether rows valid in a neighbouring call are padding in this one."""
    index: int
    lengths: str | None
    padded: bool


def names(orders: tuple[str, ...] = ()) -> tuple[str, ...]:
    """The ``calls`` values of an op whose calls carry ``orders`` (none: values only)."""
    return tuple(b if not orders else f"{b}-{o}" for b in BUFFERS for o in (orders or (None,)))


def parse(op: str, value: str, orders: tuple[str, ...]) -> tuple[str, str, tuple[Step, ...]]:
    """The run ``value`` names (``one``: the op's first refilled run, what a per-case check of
    a single case means by a call sequence), its buffers and its steps; a value the op does not
    take is an error naming those it takes."""
    known = names(orders)
    if value == ONE:
        value = next(n for n in known if n.startswith("refilled"))
    if value not in known:
        raise ValueError(f"{op} takes calls={value!r}? It takes {', '.join((ONE,) + known)} "
                         "(harness.core.call_sequences)")
    buffers, _, order = value.partition("-")
    lengths = ORDERS[order] if order else UNORDERED
    return value, buffers, tuple(Step(i, length, length == "short" if order else i == 1)
                          for i, length in enumerate(lengths))


def starts_with(prefix: str):
    return lambda v: isinstance(v, str) and v.startswith(prefix)


def cells(orders: tuple[str, ...] = (), padding: str = "", dirty: str = "",
          reshuffled: str = "") -> tuple[Cell, ...]:
    """The ``calls`` cells of an op: new and refilled buffers, the orders of its context
    lengths, and what its runs change beside values (``padding``: rows that were valid become
    padding; ``dirty``: the in-place output starts as the previous call left it; ``reshuffled``:
    metadata redrawn), each said in the op's own terms."""
    sequence = {PARAM: lambda v: isinstance(v, str) and v != ONE}
    found = [
        Cell("calls", "new buffers", "three calls with the same shapes, new values and "
             "metadata, each in buffers of its own (state kept between calls: a plan or value "
             "cached on shapes, or kept from the first call)", {PARAM: starts_with("new")}),
        Cell("calls", "refilled buffers", "the first call's buffers refilled in place for the "
             "next calls, as a decode loop and a CUDA graph do (state keyed on buffer addresses, "
             "vLLM PR 42982's metadata cache)", {PARAM: starts_with("refilled")})]
    if "long-first" in orders:
        found.append(Cell("calls", "longer then shorter", "contexts shrinking between calls: "
                          "long, short, long", {PARAM: lambda v: str(v).endswith("long-first")}))
    if "short-first" in orders:
        found.append(Cell("calls", "shorter then longer", "contexts growing between calls: "
                          "short, long, short (a length kept from the first call truncates)",
                          {PARAM: lambda v: str(v).endswith("short-first")}))
    for name, what, when in (("rows becoming padding", padding, sequence),
                             ("dirty outputs", dirty, {PARAM: starts_with("refilled")}),
                             ("metadata reshuffled", reshuffled, sequence)):
        if what:
            found.append(Cell("calls", name, what, when))
    return tuple(found)
