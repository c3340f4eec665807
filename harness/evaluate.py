"""Run one implementation on one case and compare it with the float64 reference."""

from __future__ import annotations

import dataclasses
import re
from typing import Any, Callable

import torch

from harness.core import layouts
from harness.core.metrics import differing_bytes, differing_tokens
from harness.core.registry import Implementation, KnownDeviationSeen
from harness.core.results import KNOWN_DEVIATION, result_row
from harness.core.cases import Case
from harness.core.errors import ContractViolation, out_of_memory_errors
from harness.core.specs import Comparison, OpSpec
from harness.core.registries import Registry


@dataclasses.dataclass
class Evaluation:
    case: Case
    impl: str
    outputs: dict[str, torch.Tensor]
    rows: list[dict]

    @property
    def passed(self) -> bool:
        return bool(self.rows) and all(r["verdict"] == "pass" for r in self.rows)

    def failures(self) -> str:
        return "; ".join(f"{r['output']}: {r['detail']}" for r in self.rows
                         if r["verdict"] != "pass")

    def assert_passed(self, context: str = "") -> None:
        """Fail the calling test unless every row passed: ``AssertionError`` naming the failures,
        or :class:`KnownDeviationSeen` when every failure is covered by a known deviation (what
        the strict xfail of such a case expects, and nothing else satisfies it)."""
        prefix = f"{context}: " if context else ""
        if not self.rows:
            raise AssertionError(f"{prefix}{self.case.id} [{self.impl}] judged nothing")
        failed = [r for r in self.rows if r["verdict"] == "fail"]
        if failed:
            raise AssertionError(f"{prefix}{self.case.id} [{self.impl}]: {self.failures()}")
        known = sorted({r["known_deviation"] for r in self.rows
                        if r["verdict"] == KNOWN_DEVIATION})
        if known:
            raise KnownDeviationSeen(f"{prefix}{self.case.id} [{self.impl}]: "
                                     + "; ".join(known))


OBSERVERS: Registry[Callable[..., None]] = Registry("evaluation observer")
"""By name, called after every evaluation with keyword arguments ``spec, impl, case, check, inputs,
reference, outputs, rows, knobs, runs``: how the pytest plugin saves failing cases (harness.cases.files)
without the suites knowing."""


def _notify(**evaluation) -> None:
    for _, observer in OBSERVERS.items():
        observer(**evaluation)


def tensors_of(inputs: dict) -> dict[str, torch.Tensor]:
    """Every tensor among the inputs, tuples (``kv``) flattened to ``name[i]``."""
    found = {}
    for name, value in inputs.items():
        parts = value if isinstance(value, (tuple, list)) else (value,)
        for i, part in enumerate(parts):
            if isinstance(part, torch.Tensor):
                found[name if len(parts) == 1 else f"{name}[{i}]"] = part
    return found


GUARD_ROWS = 3


def _sentinel(t: torch.Tensor) -> torch.Tensor:
    """Guard rows: NaN for floating point, the dtype's minimum for integers."""
    if t.is_floating_point():
        return torch.full_like(t, float("nan"))
    return torch.full_like(t, torch.iinfo(t.dtype).min)


def with_guard_rows(spec: OpSpec, inputs: dict) -> tuple[dict, dict[str, tuple]]:
    """``inputs`` with each of the spec's token arguments replaced by the first rows of a buffer
    that has GUARD_ROWS more; the guards to check after the call. A view is left as given: its
    parent buffer is guarded whole (harness.core.layouts.parent_guards)."""
    if not spec.guard_inputs:
        return inputs, {}
    guarded, guards = dict(inputs), {}
    for name in spec.token_args:
        t = inputs.get(name)
        if (not isinstance(t, torch.Tensor) or t.dim() == 0 or not t.is_contiguous()
                or t._base is not None):
            continue
        rows = t.shape[0]
        buf = torch.empty((rows + GUARD_ROWS, *t.shape[1:]), dtype=t.dtype, device=t.device)
        buf[rows:] = _sentinel(buf[rows:])
        buf[:rows] = t
        guarded[name] = buf[:rows]
        guards[name] = (buf, rows, buf[rows:].clone())
    return guarded, guards


def guard_rows_written(guards: dict[str, tuple]) -> list[str]:
    found = []
    for name, (buf, rows, expect) in guards.items():
        bad = differing_bytes(buf[rows:], expect)
        if bad:
            found.append(f"{name} ({bad} bytes of the {GUARD_ROWS} rows after its last token)")
    return found


def inputs_changed(before: dict[str, torch.Tensor], inputs: dict) -> list[str]:
    """Inputs whose bytes differ from their copy taken before the call (in-place outputs are
    copies the spec makes, so every input must come back untouched)."""
    changed = []
    for name, now in tensors_of(inputs).items():
        old = before.get(name)
        if old is None or now.shape != old.shape:
            continue
        bad = differing_bytes(now, old)
        if bad:
            changed.append(f"{name} ({bad} bytes)")
    return changed


def written_cells(spec: OpSpec, name: str, a: torch.Tensor, b: torch.Tensor,
                  unwritten: dict | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Two calls' ``name`` outputs in the form they must agree on bitwise: the spec's canonical
    view, with the elements the implementation declares it leaves unwritten (``unwritten``:
    output -> mask, from ``OpSpec.unwritten``) set equal, since they hold whatever the buffer
    held."""
    mask = (unwritten or {}).get(name)
    if mask is not None and a.shape == b.shape == mask.shape:
        a, b = a.masked_fill(mask, 0), b.masked_fill(mask, 0)
    return spec.canonical(name, a), spec.canonical(name, b)


def compare_runs(spec: OpSpec, case: Case, impl: str, first: dict, later: dict,
                 run: int, unwritten: dict | None = None) -> list[dict]:
    """One row per output: does run ``run`` (2, 3, ...) reproduce the first run's bits? Elements
    the implementation declares it leaves unwritten (``unwritten``: output -> mask) are not
    compared: they hold whatever the buffer held."""
    rows = []
    for name in spec.outputs:
        a, b = written_cells(spec, name, first[name], later[name], unwritten)
        tokens = differing_tokens(a, b)
        detail = ""
        if tokens:
            diff = ""
            if a.shape == b.shape and a.is_floating_point():
                gap = (a.double() - b.double()).abs().nan_to_num(nan=float("inf"))
                diff = f", max |diff| {gap.max().item():.3g}"
            detail = (f"nondeterministic: run {run} differs from run 1 in {len(tokens)} of "
                      f"{a.shape[0] if a.dim() else 1} tokens (first: "
                      f"{', '.join(map(str, tokens[:8]))}){diff}")
        rows.append(result_row(case, impl, "determinism", name, passed=not tokens, detail=detail,
                               runs=run, worst_token=tokens[0] if tokens else None))
    return rows


def kept(outputs: dict) -> dict:
    """Copies of ``outputs`` to compare later calls with: an implementation that returns one
    persistent buffer would otherwise be compared with itself."""
    return {name: t.detach().clone() if isinstance(t, torch.Tensor) else t
            for name, t in outputs.items()}


class ImplementationOutOfMemory(ContractViolation):
    """The implementation under test ran out of device memory on a case whose inputs and
    reference the harness had already built: the kernel's failure (a verdict of 1), unlike the
    harness's own allocations failing, which make the run "could not test"."""

    def __init__(self, exc: BaseException) -> None:
        asked = re.search(r"[Tt]ried to allocate [0-9.]+ [KMGT]?i?B", str(exc))
        super().__init__("the implementation ran out of device memory on a case whose inputs "
                         "and reference fit" + (f" ({asked.group(0)})" if asked else "")
                         + ": a kernel that over-allocates is a failure")


def _launch(spec: OpSpec, impl: Implementation, call: dict, **knobs: Any) -> dict:
    """The implementation's outputs on the prepared ``call``; its out-of-memory errors become
    :class:`ImplementationOutOfMemory`."""
    try:
        return spec.collect(call, spec.launch(impl.fn, call, **knobs))
    except out_of_memory_errors() as exc:
        error = ImplementationOutOfMemory(exc)  # the frames holding its tensors go here
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    raise error


def _run_again(spec, impl, case, inputs, first, run, knobs, unwritten) -> list[dict]:
    try:
        later = _launch(spec, impl, spec.prepare(inputs), **knobs)
    except ContractViolation as exc:
        return [result_row(case, impl.name, "determinism", "*", passed=False,
                           detail=f"run {run} broke the contract after run 1 did not: {exc}")]
    return compare_runs(spec, case, impl.name, first, later, run, unwritten)


@dataclasses.dataclass(frozen=True)
class Refilled:
    """Buffers a decode loop keeps from call to call (harness.detectors.call_sequence): the
    call's arguments, used as they are (no fresh copies: the same addresses every call), the
    guard rows after its token arguments, and the arguments the op writes in place (outputs,
    not inputs: they keep what the previous call left)."""
    call: dict
    guards: dict
    written: tuple[str, ...]


def _refusal_row(case: Case, impl: Implementation, check: str, exc: Exception,
                 broken: dict[str, list[str]]) -> dict:
    """An implementation that declares what its inputs must be (harness.core.layouts) raised on
    inputs that are not: a pass when the error names the input and the requirement."""
    what = ", ".join(f"{name} not {' or '.join(reqs)}" for name, reqs in broken.items())
    error = f"{type(exc).__name__}: {exc}"
    if layouts.refusal(exc, broken, layouts.own_names(impl.fn)):
        return result_row(case, impl.name, check, "*", passed=True, refused=True,
                          detail=f"refused as declared ({what}): {error}")
    return result_row(case, impl.name, check, "*", passed=False,
                      detail=f"declares {layouts.DECLARED} {impl.declared[layouts.DECLARED]!r} "
                             f"and raised on inputs that break it ({what}) without naming the "
                             f"input and the requirement: {error}")


def evaluate(spec: OpSpec, impl: Implementation, case: Case, inputs: dict | None = None,
             ref: dict | None = None, check: str = "accuracy", runs: int = 1,
             buffers: Refilled | None = None, **knobs: Any) -> Evaluation:
    """Outputs of ``impl`` on ``case`` and one comparison row per output; with ``runs`` > 1,
    the later runs on the same inputs must reproduce the first bitwise (one determinism row
    per output and run, see harness.detectors.determinism). ``buffers``: call on these
    (``inputs`` is then ``buffers.call``) instead of fresh copies with guard rows of its own.

    A contract violation by the implementation (wrong number of outputs, shapes, dtypes) is a
    failed comparison, not a crash: the harness reports it like any other wrong answer.
    """
    inputs = spec.make_inputs(case) if inputs is None else inputs
    ref = spec.reference(inputs) if ref is None else ref
    spec.check_reference(ref)
    if buffers is None:
        inputs = layouts.lay_out(spec, case, inputs)
        parents = layouts.parent_guards(inputs, spec.written_args)
        inputs, guards = with_guard_rows(spec, inputs)
        written: tuple[str, ...] = ()
    elif runs > 1:
        raise ValueError("refilled buffers are called once each: their outputs change them")
    else:
        parents = []
        guards, written = buffers.guards, buffers.written
    read = {name: value for name, value in inputs.items() if name not in written}
    before = {name: t.detach().clone() for name, t in tensors_of(read).items()}
    broken = layouts.unmet(impl, inputs, spec.written_args)
    try:
        call = spec.prepare(inputs) if buffers is None else buffers.call
        outputs = _launch(spec, impl, call, **knobs)
    except ContractViolation as exc:
        rows = [result_row(case, impl.name, check, "*", passed=False, detail=str(exc))]
        _notify(spec=spec, impl=impl, case=case, check=check, inputs=inputs, reference=ref,
                outputs={}, rows=rows, knobs=knobs, runs=runs)
        return Evaluation(case, impl.name, {}, rows)
    except Exception as exc:
        if not broken:
            raise
        rows = [_refusal_row(case, impl, check, exc, broken)]
        _notify(spec=spec, impl=impl, case=case, check=check, inputs=inputs, reference=ref,
                outputs={}, rows=rows, knobs=knobs, runs=runs)
        return Evaluation(case, impl.name, {}, rows)
    outputs = kept(outputs)
    comparison = Comparison(inputs, outputs, spec.refine_reference(inputs, outputs, ref), impl)
    rows = []
    deviations = impl.deviations_for(case)
    for judged in spec.compare(comparison) + spec.extra_checks(call):
        passed = judged.pop("passed")
        row = result_row(case, impl.name, check, passed=passed, **judged)
        covering = None if passed else next((d for d in deviations if d.covers(row)), None)
        if covering is not None:
            row.update(verdict=KNOWN_DEVIATION, known_deviation=covering.reason)
        elif not passed and deviations:
            row["detail"] += (" (beyond what the known deviation of this case documents: "
                              + "; ".join(d.reason[:80] for d in deviations) + ")")
        rows.append(row)
    past_the_end = guard_rows_written(guards)
    if past_the_end:
        rows.append(result_row(case, impl.name, check, "guard", passed=False,
                               detail="the implementation wrote past the end of its inputs: "
                                      + ", ".join(past_the_end)))
    outside = layouts.written_outside(parents)
    if outside:
        rows.append(result_row(case, impl.name, check, "guard", passed=False,
                               detail="the implementation wrote outside its input views, into "
                                      "their parent buffers: " + "; ".join(outside)))
        for parent in parents:
            parent.restore()
    changed = inputs_changed(before, read)
    if changed:
        rows.append(result_row(case, impl.name, check, "inputs", passed=False,
                               detail="the implementation wrote into its inputs: "
                                      + ", ".join(changed)))
        for name, saved in before.items():  # later checks on these inputs see them as generated
            target = tensors_of(read).get(name)
            if target is not None:
                target.copy_(saved)
    unwritten = spec.unwritten(comparison) if runs > 1 else {}
    for run in range(2, runs + 1):
        rows += _run_again(spec, impl, case, inputs, outputs, run, knobs, unwritten)
    _notify(spec=spec, impl=impl, case=case, check=check, inputs=inputs, reference=ref,
            outputs=outputs, rows=rows, knobs=knobs, runs=runs)
    return Evaluation(case, impl.name, outputs, rows)
