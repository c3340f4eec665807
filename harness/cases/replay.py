"""``harness replay FILE...``: a saved case (harness.cases.files) judged again, on this machine and
build, by the same comparison as the suites.

Exit codes follow ``git bisect run``: 0 every case passes, 1 one fails, 125 one could not be
replayed (unreadable or foreign file, unknown op, implementation missing or unable to run
here). Each case is also compared with the outputs saved with it: "same failure, bit for bit",
"same failure" (the same outputs fail and the new outputs are within the op's tolerance of the
saved ones: another device or build rounds differently), "different failure", or "fixed".
"""

from __future__ import annotations

import dataclasses
import pathlib
import sys

import torch

from harness import families
from harness.cases import files as casefile
from harness.core.metrics import differing_bytes
from harness.detectors.registry import PER_CASE, per_case_check
from harness.core.verdicts import EXIT_BAD, EXIT_GOOD, EXIT_UNTESTABLE

ENV_KEYS = ("gpu", "device", "torch", "triton", "vllm", "vllm_commit", "git_commit")


@dataclasses.dataclass
class Replay:
    path: pathlib.Path
    code: int
    headline: str
    details: list[str] = dataclasses.field(default_factory=list)


def _same_outputs(new: dict, saved: dict) -> bool:
    if set(new) != set(saved):
        return False
    for name, tensor in new.items():
        old = saved[name]
        if not isinstance(tensor, torch.Tensor) or not isinstance(old, torch.Tensor):
            return False
        a, b = tensor.detach().cpu(), old
        if a.shape != b.shape or a.dtype != b.dtype:
            return False
        if differing_bytes(a, b):
            return False
    return True


def _close_outputs(spec, new: dict, saved: dict) -> bool:
    if set(new) != set(saved):
        return False
    for name, tensor in new.items():
        a, b = tensor.detach().cpu(), saved[name]
        if a.shape != b.shape:
            return False
        if not a.is_floating_point():
            if not torch.equal(a, b):
                return False
            continue
        tol = spec.tolerance(name)
        if not torch.allclose(a.double(), b.double(), atol=tol.atol, rtol=tol.rtol, equal_nan=True):
            return False
    return True


def _kind_of_failure(spec, ev, data) -> str:
    if _same_outputs(ev.outputs, data["outputs"]):
        return "same failure as saved, bit for bit"
    failing = [sorted({r.get("output") for r in rows if r.get("verdict") == "fail"})
               for rows in (ev.rows, data["rows"])]
    if failing[0] == failing[1] and _close_outputs(spec, ev.outputs, data["outputs"]):
        return "same failure as saved; outputs within the op's tolerance of the saved ones"
    return "different failure from the saved one"


def _failures(rows: list[dict]) -> str:
    return "; ".join(f"{r.get('output')}: {r.get('detail')}" for r in rows
                     if r.get("verdict") == "fail") or "none"


def replay_one(path: pathlib.Path, impl_name: str | None, device: str) -> Replay:
    from harness.evaluate import evaluate
    from harness.core.ops import UnknownOpError
    from harness.core.registry import RegistryError, records
    from harness.core.specs import get_spec

    try:
        data = casefile.load(path)
    except casefile.CaseFileError as exc:
        return Replay(path, EXIT_UNTESTABLE, f"could not replay: {exc}")
    op, name = data["op"], impl_name or data["impl"]
    try:
        spec = get_spec(op)
    except (UnknownOpError, KeyError, RegistryError) as exc:
        return Replay(path, EXIT_UNTESTABLE, f"could not replay: {path} is a case of {op!r}, "
                      f"which this harness does not know ({exc})")
    record = records(op).get(name)
    if record is None or not record.available:
        why = record.reason if record is not None else "no such implementation is registered"
        return Replay(path, EXIT_UNTESTABLE, f"could not replay: {op}/{name} cannot run here "
                      f"({why}); pass --impl NAME or --impl-module PATH")
    case = casefile.case_of(data, device)
    if data.get("check") in PER_CASE:
        return _replay_detector(path, data, spec, record, case)
    inputs = casefile.to_device(data["inputs"], device)
    reference = casefile.to_device(data["reference"], device)
    runs = int(data.get("runs", 1))
    ev = evaluate(spec, record, case, inputs=inputs, ref=reference, check=data.get("check",
                  "accuracy"), runs=runs, **data.get("knobs", {}))
    saved = _failures(data["rows"])
    details = [f"saved by {data['impl']} ({saved})",
               "saved on " + ", ".join(f"{k}={data['environment'].get(k, '?')}"
                                       for k in ENV_KEYS if k in data["environment"])]
    title = (f"{op}/{name} on {case.id} [{data.get('check', 'accuracy')}"
             + (f", {runs} runs" if runs > 1 else "") + "]")
    if ev.passed:
        return Replay(path, EXIT_GOOD, f"PASS (fixed): {title}", details)
    return Replay(path, EXIT_BAD, f"FAIL ({_kind_of_failure(spec, ev, data)}): {title}: "
                  f"{ev.failures()}", details)


def _replay_detector(path: pathlib.Path, data: dict, spec, record, case) -> Replay:
    """A case a per-case detector flagged (batch invariance, CUDA-graph replays, ...): the
    detector runs again on the case, whose inputs regenerate from its seed."""
    check = data["check"]
    finding = per_case_check(check)(spec, record, case)
    title = f"{data['op']}/{record.name} on {case.id} [{check}]"
    details = [f"saved by {data['impl']} ({_failures(data['rows'])})"]
    if finding.passed:
        return Replay(path, EXIT_GOOD, f"PASS (fixed): {title}", details)
    return Replay(path, EXIT_BAD, f"FAIL ({check} flags it again): {title}: {finding.message}",
                  details)


def main(paths: list[str], impl: str | None, impl_modules: list[str], device: str | None) -> int:
    from harness.core.device import configure_triton, default_device
    from harness.impl_modules import ImplModuleError, load_impl_modules

    configure_triton(cpu_tensors=device == "cpu")
    families.load()
    try:
        load_impl_modules(impl_modules, env=True)
    except ImplModuleError as exc:
        print(f"replay verdict: could not test ({exc})", file=sys.stderr)
        return EXIT_UNTESTABLE
    device = device or default_device()
    results = [replay_one(pathlib.Path(p), impl, device) for p in paths]
    codes = {r.code for r in results}
    code = EXIT_UNTESTABLE if EXIT_UNTESTABLE in codes else (EXIT_BAD if EXIT_BAD in codes
                                                             else EXIT_GOOD)
    verdict = {EXIT_GOOD: "good", EXIT_BAD: "bad"}.get(code, "could not test")
    print(f"replay verdict: {verdict} ({sum(r.code == EXIT_GOOD for r in results)} pass, "
          f"{sum(r.code == EXIT_BAD for r in results)} fail, "
          f"{sum(r.code == EXIT_UNTESTABLE for r in results)} could not be replayed; "
          f"device {device})")
    for r in results:
        print(f"- {r.path}: {r.headline}")
        for line in r.details:
            print(f"    {line}")
    return code
