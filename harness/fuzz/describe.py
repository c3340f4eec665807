"""A shrunk failure in the terms of the op's contract: its sizes and parameters, the small
metadata tensors it was called with (``seq_lens [1, 9]``), what failed, and where the output
first differs from the reference (``row 1: got [0, 3, 2, -1], expected [0, 2, -1, -1]``)."""

from __future__ import annotations

import torch

from harness.core.specs import OpSpec
from harness.fuzz.judge import Failure

SHOWN_ELEMENTS = 16


def _small_ints(spec: OpSpec, inputs: dict) -> list[str]:
    shown = []
    for name, value in inputs.items():
        if name not in spec.outputs and (isinstance(value, torch.Tensor) and not value.is_floating_point()
                and value.dtype != torch.uint8 and 0 < value.numel() <= SHOWN_ELEMENTS):
            shown.append(f"{name} {value.flatten().tolist()}")
    return shown


def _row_text(t: torch.Tensor) -> str:
    values = t.flatten().tolist()
    if len(values) > SHOWN_ELEMENTS:
        return "[" + ", ".join(map(str, values[:SHOWN_ELEMENTS])) + ", ...]"
    return str([round(v, 6) if isinstance(v, float) else v for v in values])


def first_difference(spec: OpSpec, failure: Failure) -> str:
    """Where the failing output first differs from the reference, row by row."""
    ev = failure.evidence
    if not ev:
        return ""
    for row in failure.rows:
        name = str(row.get("output", "")).split("/")[0]
        got, want = ev["outputs"].get(name), ev["reference"].get(name)
        if not isinstance(got, torch.Tensor) or not isinstance(want, torch.Tensor):
            continue
        if got.shape != want.shape or got.dim() == 0:
            continue
        a = spec.canonical(name, got).double().cpu()
        b = spec.canonical(name, want).double().cpu()
        differ = ~((a == b) | (a.isnan() & b.isnan()))
        if not differ.any():
            continue
        first = int(differ.flatten(1).any(1).nonzero()[0]) if a.dim() > 1 else int(differ.nonzero()[0])
        return (f"{name} row {first}: got {_row_text(got[first].cpu())}, reference "
                f"{_row_text(want[first].cpu())}")
    return ""


def describe(spec: OpSpec, failure: Failure) -> str:
    case = failure.case
    parts = [case.op, f"T {case.tokens}"] + ([f"H {case.hidden}"] if case.hidden else [])
    parts += [f"{k} {v}" for k, v in case.params] + [f"seed {case.seed}"]
    if failure.evidence:
        parts += _small_ints(spec, failure.evidence["inputs"])
    where = first_difference(spec, failure)
    return (", ".join(parts) + f": [{failure.check}] {failure.detail[:300]}"
            + (f"; {where}" if where else ""))
