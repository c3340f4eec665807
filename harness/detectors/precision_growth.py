"""Large-token precision: error that grows with the token count T.

The maximum error over T tokens grows with T by itself (more draws from the same distribution),
so this compares per-token error statistics instead: for every T of the sweep, each token's
relative error (its max abs error over its max |reference|) is computed, and the median, the
99th percentile and the maximum of those over tokens are tracked. A point is flagged when a statistic exceeds
``GROWTH`` times its small-T baseline (the same statistic over the pooled tokens of every
T <= ``baseline_max_tokens``), with the baseline floored at the output's noise level
(``harness.tolerances.noise_floor``) so a kernel that is exact at small T is not flagged for
ordinary rounding at large T.

Calibration: fp32 torch mhc_pre against float64 on the H100 keeps its per-token p50/p99 within
~2x between T=1 and T=65536 (cuBLAS switches kernels with T, which moves the error a little); a
GEMM that drops to fp16/bf16 above some T moves them by 100-1000x. GROWTH=8 sits between.
"""

from __future__ import annotations

from typing import Iterable

import torch

from harness.detectors import Finding
from harness.metrics import per_token_error
from harness.registry import Implementation
from harness.specs import Case, OpSpec
from harness.tolerances import noise_floor

GROWTH = 8.0
STATS = {"p50": 0.5, "p99": 0.99, "max": 1.0}
"""``max`` catches a loss confined to a few tokens (a last tile, one split) that p50 and p99
never see: at T=257 one bad token is 0.4% of them. Its baseline is the worst of the pooled
small-T tokens, floored at the noise level like the others."""


def token_errors(spec: OpSpec, impl: Implementation, case: Case) -> dict[str, torch.Tensor]:
    """Per-token relative error of every output of ``impl`` on ``case``."""
    inputs = spec.make_inputs(case)
    ref = spec.reference(inputs)
    outputs = spec.run(impl.fn, inputs)
    ref = spec.refine_reference(inputs, outputs, ref)
    return {name: per_token_error(outputs[name], ref[name]) for name in spec.outputs}


def _stats(errs: torch.Tensor) -> dict[str, float]:
    if not errs.numel():
        return {stat: 0.0 for stat in STATS}
    return {stat: float(torch.quantile(errs, q)) for stat, q in STATS.items()}


def check(spec: OpSpec, impl: Implementation, cases: Iterable[Case],
          baseline_max_tokens: int, growth: float = GROWTH) -> Finding:
    """The baseline pools the tokens of every case with T <= ``baseline_max_tokens``, so its
    p99 is a real percentile rather than the maximum of a handful of tokens."""
    cases = sorted(cases, key=lambda c: c.tokens)
    if not any(c.tokens <= baseline_max_tokens for c in cases) or \
            not any(c.tokens > baseline_max_tokens for c in cases):
        raise ValueError(f"the sweep needs token counts on both sides of "
                         f"{baseline_max_tokens}; got {[c.tokens for c in cases]}")
    errors = {c: token_errors(spec, impl, c) for c in cases}
    flagged, rows = [], []
    for name in spec.outputs:
        floor = noise_floor(spec.op, name, spec.output_dtypes[name])
        pooled = torch.cat([e[name] for c, e in errors.items() if c.tokens <= baseline_max_tokens])
        base = {stat: max(v, floor) for stat, v in _stats(pooled).items()}
        for case, errs in errors.items():
            stats = _stats(errs[name])
            judged = case.tokens > baseline_max_tokens
            bad = [stat for stat in STATS if judged and stats[stat] > growth * base[stat]]
            flagged += [f"{name} {stat} at T={case.tokens} is {stats[stat]:.3g}, "
                        f"{stats[stat] / base[stat]:.1f}x its small-T baseline {base[stat]:.3g}"
                        for stat in bad]
            rows.append({"op": case.op, "impl": impl.name, "case": case.id, "tokens": case.tokens,
                         "hidden": case.hidden, "check": "precision_growth", "output": name,
                         **stats, **{f"{s}_growth": stats[s] / base[s] for s in STATS},
                         "max_rel": float(errs[name].max()) if errs[name].numel() else 0.0,
                         "verdict": "fail" if bad else "pass"})
    message = "; ".join(flagged) if flagged else (
        f"per-token error flat across T={cases[0].tokens}..{cases[-1].tokens} "
        f"(growth < {growth:g}x)")
    return Finding("precision_growth", spec.op, impl.name, not flagged, message, rows)
