"""``harness fuzz``: budgeted searches over every selected (op, implementation), or over the
seeded faults one at a time (the fuzzer's own self-check), with a verdict.

The budget is split over the targets as they come: each gets an even share of what is left, so
time a target does not use (a seeded fault found in a second) goes to the later ones. Each
failure is saved as a case file in the report folder (``harness replay`` judges it anywhere) and
written to ``fuzz.md``/``fuzz.json``.
"""

from __future__ import annotations

import dataclasses
import pathlib
import time

from harness import families
from harness.core.device import triton_interpreted
from harness.core.registry import Implementation, records
from harness.core.specs import OpSpec, all_specs
from harness.detectors.registry import PER_CASE
from harness.fuzz.judge import not_fuzzable
from harness.fuzz.search import Search, search
from harness.profiles import BASELINE_MAX_TOKENS
from harness.core.verdicts import SEEDED_FAULT_PREFIX

MAX_ELEMENTS = {"gpu": 2 ** 28, "cpu": 2 ** 22, "interpreted": 2 ** 15}
"""Largest drawn case (``OpSpec.case_elements``) by where it runs: a GPU; torch on a CPU; a
Triton kernel under the CPU interpreter, where each example must stay at seconds."""


@dataclasses.dataclass
class Target:
    spec: OpSpec
    impl: Implementation
    fault: str | None = None
    """The seeded fault this implementation is (the self-check), or None."""
    detectors: tuple[str, ...] | None = None
    """Per-case detectors to run (None: those the op's faults prove sound for it)."""
    max_elements: int | None = None


@dataclasses.dataclass
class Options:
    device: str
    minutes: float
    examples: int
    seed: int
    database: pathlib.Path | None
    max_elements: int | None = None
    runs: int = 2


def max_elements_for(impl: Implementation, device: str, override: int | None) -> int:
    if override:
        return override
    if str(device).startswith("cuda"):
        return MAX_ELEMENTS["gpu"]
    return MAX_ELEMENTS["interpreted" if impl.triton and triton_interpreted() else "cpu"]


INTERPRETED = ("a Triton kernel under the CPU interpreter takes seconds a case, so a budget "
               "buys a handful: fuzz it on a GPU, or name it with --impl to fuzz it here anyway")


def implementation_targets(ops: list[str] | None, impls: list[str] | None
                           ) -> tuple[list[Target], list[dict]]:
    """Every available implementation of the selected ops (seeded faults left out; Triton under
    the CPU interpreter only when named); what was left out, with the reason."""
    targets, left_out = [], []
    for op, spec in sorted(all_specs().items()):
        if ops and op not in ops:
            continue
        for name, impl in sorted(records(op).items()):
            if name.startswith(SEEDED_FAULT_PREFIX) or (impls and name not in impls):
                continue
            if not impl.available:
                left_out.append({"op": op, "impl": name, "reason": impl.reason})
            elif impl.triton and triton_interpreted() and not impls:
                left_out.append({"op": op, "impl": name, "reason": INTERPRETED})
            elif spec.fuzz_space is None:
                left_out.append({"op": op, "impl": name, "reason": "the op declares no fuzz space"})
            else:
                targets.append(Target(spec, impl))
    return targets, left_out


def fault_targets(names: list[str] | None, device: str) -> tuple[list[Target], list[dict]]:
    """Each seeded fault the fuzzer can reach (built to break above BASELINE_MAX_TOKENS, as in
    the smoke self-test); the others with the reason."""
    specs = all_specs()
    targets, left_out = [], []
    for fault in families.all_faults():
        if names and fault.name not in names:
            continue
        why = not_fuzzable(fault.detector)
        if not why and fault.needs_gpu and not str(device).startswith("cuda"):
            why = "its detector or its inputs need a GPU (a CUDA-graph capture, or 2^31+ bytes)"
        if why:
            left_out.append({"op": fault.op, "impl": fault.name, "reason": why})
            continue
        own = (fault.detector,) if fault.detector in PER_CASE else ()
        targets.append(Target(specs[fault.op], fault.build(BASELINE_MAX_TOKENS), fault.name,
                              detectors=own, max_elements=fault.fuzz_max_elements))
    if names:
        unknown = sorted(set(names) - {f.name for f in families.all_faults()})
        if unknown:
            raise KeyError(f"no seeded fault named {', '.join(unknown)}; `harness selftest` "
                           "lists them")
    return targets, left_out


def run_targets(targets: list[Target], options: Options, progress=print) -> list[Search]:
    deadline = time.monotonic() + options.minutes * 60
    results = []
    for i, t in enumerate(targets, 1):
        share = max(deadline - time.monotonic(), 1.0) / (len(targets) - i + 1)
        label = t.fault or t.impl.name
        progress(f"fuzz [{i}/{len(targets)}] {t.spec.op} / {label}: up to {share:.0f} s, "
                 f"{options.examples} examples")
        db = None if options.database is None else options.database / t.spec.op / label
        found = search(t.spec, t.impl, device=options.device, seconds=share,
                       max_examples=options.examples, seed=options.seed,
                       max_elements=max_elements_for(t.impl, options.device,
                                                     options.max_elements or t.max_elements),
                       database=db, runs=options.runs, stop_at_first=t.fault is not None,
                       detectors=t.detectors)
        progress(f"    {found.examples} judged in {found.seconds:.1f} s, "
                 f"{len(found.found)} failure(s)")
        results.append(found)
    return results
