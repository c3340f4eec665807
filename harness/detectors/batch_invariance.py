"""Batch invariance: a token's output must not depend on the rest of the batch.

Probe tokens are computed alone, inside a small batch and inside a large batch of random other
tokens, at different positions. Their rows must be bitwise equal where the implementation claims
batch invariance (``register(..., batch_invariant=True)``), else equal within the op tolerance.
"""

from __future__ import annotations

import torch

from harness.core.results import Finding, result_row
from harness.detectors.compare import outputs_agree
from harness.core.device import triton_interpreted
from harness.core.registry import Implementation
from harness.core.cases import Case
from harness.core.specs import OpSpec
from harness.evaluate import kept


def check(spec: OpSpec, impl: Implementation, case: Case, n_probes: int = 3,
          small_batch: int = 7) -> Finding:
    """``case.tokens`` is the large batch; probes are its first, middle and last tokens."""
    inputs = spec.make_inputs(case)
    t = spec.token_count(inputs)
    probes = sorted({0, t // 2, t - 1})[:n_probes]
    large = kept(spec.run(impl.fn, inputs))  # kept: the calls below may reuse its buffer
    g = torch.Generator().manual_seed(case.seed)
    others = [i for i in torch.randperm(t, generator=g).tolist() if i not in probes]
    small_idx = (others[:max(small_batch - len(probes), 0)] + probes)
    small_idx = [small_idx[i] for i in torch.randperm(len(small_idx), generator=g).tolist()]
    small = kept(spec.run(impl.fn, spec.take_tokens(inputs, small_idx)))
    bitwise = impl.batch_invariant
    problems = []
    rows = []
    for p in probes:
        alone = spec.run(impl.fn, spec.take_tokens(inputs, [p]))
        in_small = {k: v[small_idx.index(p)].unsqueeze(0) for k, v in small.items()}
        in_large = {k: v[p].unsqueeze(0) for k, v in large.items()}
        for label, other in (("small batch", in_small), (f"batch of {t}", in_large)):
            bad = outputs_agree(spec, alone, other, bitwise)
            problems += [f"token {p} alone vs in {label}: {b}" for b in bad]
            rows.append(result_row(case.with_tokens(t), impl.name, "batch_invariance",
                                   f"token{p}/{label}", passed=not bad, detail="; ".join(bad)))
    mode = ("bitwise" + (" (Triton interpreter: numpy arithmetic with a BLAS-free dot)"
                         if triton_interpreted() else "")) if bitwise else "within tolerance"
    message = "; ".join(problems[:4]) if problems else (
        f"probe tokens {probes} equal ({mode}) alone, in a batch of {len(small_idx)} and of {t}")
    return Finding("batch_invariance", spec.op, impl.name, not problems, message, rows)
