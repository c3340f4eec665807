"""Config invariance: knobs such as ``n_splits`` must not change the result beyond rounding.

Each value of each knob the implementation declares is run; every result must pass the op
tolerance against the float64 reference and agree with the default configuration within it.
Under a declared accumulation class other than fp32 (fp8 tensor cores, where a launch plan picks
the MMA shape and with it the order of the accumulator's additions), each configuration is
judged against the reference within that class's bound, which is the promise such a kernel makes.
"""

from __future__ import annotations

from harness.core.results import Finding
from harness.detectors.compare import outputs_agree
from harness.evaluate import evaluate, kept
from harness.core.registry import Implementation
from harness.core.cases import Case
from harness.core.specs import OpSpec


def check(spec: OpSpec, impl: Implementation, case: Case) -> Finding:
    if not impl.knobs:
        return Finding("config_invariance", spec.op, impl.name, True, "no knobs declared")
    inputs = spec.make_inputs(case)
    ref = spec.reference(inputs)
    default = kept(spec.run(impl.fn, inputs))  # kept: the knob runs may reuse its buffer
    problems, rows = [], []
    for knob, values in impl.knobs.items():
        for value in values:
            ev = evaluate(spec, impl, case, inputs=inputs, ref=ref,
                          check=f"config_invariance[{knob}={value}]", **{knob: value})
            rows += ev.rows
            if any(r["verdict"] == "fail" for r in ev.rows):  # known deviations: reported apart
                problems.append(f"{knob}={value}: {ev.failures()}")
            elif ev.outputs and impl.accumulation == "fp32":
                problems += [f"{knob}={value} vs default: {b}"
                             for b in outputs_agree(spec, default, ev.outputs, bitwise=False)]
    within = ("" if impl.accumulation == "fp32"
              else f" (each within the {impl.accumulation} bound of the reference)")
    message = "; ".join(problems) if problems else (
        "results agree for " + ", ".join(f"{k} in {v}" for k, v in impl.knobs.items()) + within)
    return Finding("config_invariance", spec.op, impl.name, not problems, message, rows)
