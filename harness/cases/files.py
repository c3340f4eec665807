"""A failing case as a file that travels: its inputs, the reference, the failing outputs, the
comparison rows (with the tolerance that applied) and the environment, in one ``torch.save``
file that ``torch.load(weights_only=True)`` reads back on any machine.

Files go to ``<report dir>/cases/``; a run saves at most ``HARNESS_CASE_BUDGET_MB`` (default
256) of them. A case over the remaining budget is listed in ``cases/not_saved.txt`` with its
size instead, so the report says which failures could not travel.
"""

from __future__ import annotations

import os
import pathlib
import re
from typing import Any

import torch

FORMAT = "kernel-harness-case"
VERSION = 2
"""2: references name their extras as the spec declares them (``bound``, the K-cache layouts) and
cases use the families' parameter names (``top_k``, ``context``); a version-1 file is refused
with the reason (its reference and case would be misread)."""
DEFAULT_BUDGET_MB = 256


class CaseFileError(RuntimeError):
    """The file is not a readable harness case (damaged, truncated, foreign or too new)."""


def to_device(obj: Any, device: str | torch.device) -> Any:
    """Tensors anywhere in nested dicts / tuples / lists moved to ``device``."""
    if isinstance(obj, torch.Tensor):
        return obj.detach().to(device)
    if isinstance(obj, dict):
        return {k: to_device(v, device) for k, v in obj.items()}
    if isinstance(obj, (tuple, list)):
        return type(obj)(to_device(v, device) for v in obj)
    return obj


def _nbytes(obj: Any) -> int:
    if isinstance(obj, torch.Tensor):
        return obj.numel() * obj.element_size()
    if isinstance(obj, dict):
        return sum(_nbytes(v) for v in obj.values())
    if isinstance(obj, (tuple, list)):
        return sum(_nbytes(v) for v in obj)
    return 0


def _plain(value: Any) -> Any:
    """Row values as plain Python (weights_only loading accepts no numpy scalars)."""
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    if isinstance(value, (tuple, list)):
        return [_plain(v) for v in value]
    if hasattr(value, "item"):
        return value.item()
    return str(value)


def file_name(op: str, impl: str, case_id: str, check: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", f"{op}--{impl}--{case_id}--{check}") + ".pt"


def save(folder: pathlib.Path, *, impl, case, check: str, inputs: dict, reference: dict,
         outputs: dict, rows: list[dict], environment: dict[str, str],
         knobs: dict | None = None, runs: int = 1) -> pathlib.Path | None:
    """Write one case under ``folder/cases``; None (and a line in not_saved.txt) when it would
    exceed the run's budget. ``runs``: how many calls judged it (a replay makes as many, or a
    nondeterministic failure would replay once and read as fixed)."""
    cases = folder / "cases"
    cases.mkdir(parents=True, exist_ok=True)
    path = cases / file_name(case.op, impl.name, case.id, check)
    size = _nbytes(inputs) + _nbytes(reference) + _nbytes(outputs)
    budget = float(os.environ.get("HARNESS_CASE_BUDGET_MB", DEFAULT_BUDGET_MB)) * 2 ** 20
    used = sum(p.stat().st_size for p in cases.glob("*.pt"))
    if used + size > budget:
        with open(cases / "not_saved.txt", "a") as note:
            note.write(f"{path.name}: {size / 2 ** 20:.1f} MB, over the run's case budget "
                       f"({budget / 2 ** 20:.0f} MB, HARNESS_CASE_BUDGET_MB)\n")
        return None
    torch.save({
        "format": FORMAT, "version": VERSION, "op": case.op, "impl": impl.name, "check": check,
        "case": {"op": case.op, "tokens": case.tokens, "hidden": case.hidden, "seed": case.seed,
                 "device": case.device, "params": [list(p) for p in case.params]},
        "knobs": {k: _plain(v) for k, v in (knobs or {}).items()}, "runs": int(runs),
        "declared": {"accumulation": impl.accumulation, **dict(impl.declared)},
        "inputs": to_device(inputs, "cpu"), "reference": to_device(reference, "cpu"),
        "outputs": to_device(outputs, "cpu"),
        "rows": [{k: _plain(v) for k, v in row.items()} for row in rows],
        "environment": {k: str(v) for k, v in environment.items()},
    }, path)
    return path


def load(path: str | pathlib.Path) -> dict:
    """The saved case, or :class:`CaseFileError` saying what is wrong with the file."""
    path = pathlib.Path(path)
    if not path.is_file():
        raise CaseFileError(f"{path}: no such file")
    try:
        data = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # truncated zip, pickle of arbitrary objects, not a torch file
        raise CaseFileError(f"{path} is not a readable harness case ({type(exc).__name__}: "
                            f"{str(exc).splitlines()[0][:160]}); re-copy it from the report "
                            "folder's cases/ directory") from exc
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise CaseFileError(f"{path} is a torch file but not a harness case (no "
                            f"format={FORMAT!r}); pass a file from a report's cases/ directory")
    if data.get("version") != VERSION:
        raise CaseFileError(f"{path} has case format version {data.get('version')}; this "
                            f"harness reads version {VERSION}: replay it with a matching harness")
    missing = [k for k in ("op", "impl", "case", "inputs", "reference", "outputs", "rows")
               if k not in data]
    if missing:
        raise CaseFileError(f"{path} lacks {', '.join(missing)}: the file is damaged")
    return data


def case_of(data: dict, device: str):
    from harness.core.cases import Case

    c = data["case"]
    return Case(c["op"], tokens=c["tokens"], hidden=c["hidden"], seed=c["seed"], device=device,
                params=tuple(tuple(p) for p in c["params"]))
