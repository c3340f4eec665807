"""Call sequences: an op called again with the same shapes and new values and metadata must
give what the reference gives for each call, whatever it kept from the calls before.

Decode calls an op step after step with the same shapes: new context lengths, block tables and
values. An implementation that keeps anything between calls (a plan or metadata cached on
shapes or on its buffers' addresses, a value of the first call, an output buffer it assumes
clean) is right on the first call and wrong on a later one; every other check calls once on
fresh buffers. The run (harness.core.call_sequences, the case's ``calls``) is made by the spec
(``OpSpec.call_step``: same shapes, new values, lengths and padding), and each call is judged
by the evaluation as any call is, in buffers of its own (``new``) or in the first call's
buffers refilled in place (``refilled``), where what the op writes in place (top-k's
``indices``, the K cache) starts as the previous call left it and the reference starts there
too.
"""

from __future__ import annotations

import dataclasses

import torch

from harness.core import call_sequences
from harness.core.cases import Case
from harness.core.registry import Implementation
from harness.core.results import KNOWN_DEVIATION, Finding
from harness.core.specs import OpSpec
from harness.evaluate import Refilled, evaluate, tensors_of, with_guard_rows

NAME = "call_sequence"


def sequence(spec: OpSpec, case: Case
             ) -> tuple[str, str, list[tuple[call_sequences.Step, Case]]]:
    """The run ``case`` names, its buffers and the (step, case) of each of its calls."""
    value, buffers, steps = call_sequences.parse(
        spec.op, spec.param(case, call_sequences.PARAM), spec.call_orders)
    base = dataclasses.replace(case, params=tuple({**dict(spec.replay_params),
                                                   **dict(case.params)}.items()))
    return value, buffers, [(step, spec.call_step(base, step)) for step in steps]


def _mismatch(first: dict, later: dict) -> str | None:
    """Why two calls' inputs are not the same shapes (a spec whose ``call_step`` does not keep
    them: the harness's own error, not the implementation's)."""
    for name, value in first.items():
        other = later.get(name)
        if not isinstance(value, (torch.Tensor, tuple, list)) and value != other:
            return f"argument {name} is {other!r} instead of {value!r}"
    theirs = tensors_of(later)
    for name, t in tensors_of(first).items():
        if name not in theirs or theirs[name].shape != t.shape or theirs[name].dtype != t.dtype:
            got = tuple(theirs[name].shape) if name in theirs else None
            return f"{name} has shape {got} instead of {tuple(t.shape)}"
    return None


def _refill(static: dict, new: dict, written: tuple[str, ...]) -> None:
    """``new``'s values copied into ``static``'s buffers, but for what the op writes in place."""
    theirs = tensors_of({k: v for k, v in new.items() if k not in written})
    for name, t in tensors_of({k: v for k, v in static.items() if k not in written}).items():
        t.copy_(theirs[name])


def _label(value: str, step: call_sequences.Step, count: int) -> str:
    what = f"{step.lengths} contexts" if step.lengths else "padded" if step.padded else ""
    return f"call {step.index + 1} of {count} of {value}{f' ({what})' if what else ''}"


def check(spec: OpSpec, impl: Implementation, case: Case) -> Finding:
    """Every call of the run ``case`` names (``calls``), each against the reference."""
    value, buffers, calls = sequence(spec, case)
    inputs = [spec.make_inputs(c) for _, c in calls]
    for (_, c), later in zip(calls[1:], inputs[1:]):
        why = _mismatch(inputs[0], later)
        if why:
            raise ValueError(f"{c.id}: a call sequence needs the same shapes in every call, but "
                             f"{why}: {type(spec).__name__}.call_step must keep them")
    rows, problems, known = [], [], []
    static = refilled = None
    if buffers == "refilled":
        guarded, guards = with_guard_rows(spec, inputs[0])
        written = spec.written_in_place(guarded)
        static = spec.prepare(guarded)
        refilled = Refilled(static, guards, written)
    for (step, c), new in zip(calls, inputs):
        label = _label(value, step, len(calls))
        if refilled is None:
            ev = evaluate(spec, impl, c, inputs=new, check=NAME)
        else:
            if step.index:
                _refill(static, new, refilled.written)
            ev = evaluate(spec, impl, c, inputs=static, ref=spec.reference(static), check=NAME,
                          buffers=refilled)
        for row in ev.rows:
            row["call"] = step.index + 1
            if row["verdict"] == "fail":
                row["detail"] = f"{label}: {row['detail']}"
                problems.append(f"{row['output']}: {row['detail']}")
            elif row["verdict"] == KNOWN_DEVIATION:
                known.append(label)
        rows += ev.rows
    note = f" (known deviation of {impl.name} reported apart in {len(known)} calls)" if known else ""
    message = "; ".join(problems[:3]) if problems else (
        f"{len(calls)} calls of {value} ({buffers} buffers) each match the reference")
    return Finding(NAME, spec.op, impl.name, not problems, message + note, rows)


def check_refilled(spec: OpSpec, impl: Implementation, case: Case) -> Finding:
    """Every refilled run the op takes (each order of its lengths), one after the other on the
    same implementation: what the self-test runs. A refilled run keeps shapes and addresses, so
    state keyed on either (or kept from the first call) meets new values there; runs in new
    buffers are swept by the suite."""
    runs = [v for v in call_sequences.names(spec.call_orders) if v.startswith("refilled")]
    findings = [check(spec, impl, dataclasses.replace(
        case, params=tuple({**dict(case.params), call_sequences.PARAM: value}.items())))
        for value in runs]
    failed = [f for f in findings if not f.passed]
    message = "; ".join(f.message for f in failed[:2]) if failed else (
        f"{len(findings)} call sequences ({', '.join(runs)}) each match the reference call by "
        "call")
    return Finding(NAME, spec.op, impl.name, not failed, message,
                   [row for f in findings for row in f.rows])
