"""The statistics behind E2E verdicts.

- **Paired** (the golden has per-question results, the run answered the same questions): a
  one-sided exact McNemar test. Only discordant questions carry information: ``b`` questions the
  golden got right and the run got wrong, ``c`` the reverse. With no degradation each discordant
  question is equally likely to fall either way, so ``b ~ Binomial(b + c, 1/2)`` and
  ``p = P(X >= b)``. Exact, so its false-alarm rate is at most ``alpha`` for any accuracy and any
  amount of churn; pairing removes the between-question variance, so a 2-point drop on 1319
  questions is found even when individual answers churn.
- **Aggregate** (only the golden's accuracy and n are known): a one-sided two-proportion z-test
  with the pooled proportion. Treating the two runs as independent overstates the variance of
  their difference when they answered the same questions, so the test is conservative there.
  ``min_detectable_drop`` is the drop it detects with the given power; it is printed in every
  report because at n = 1319 and accuracy 0.95 it is about 4 points (alpha 0.01, power 0.95).
- **Detectable drop of the paired test** (``min_detectable_drop_paired``): McNemar's power
  depends on how many answers change at all, not on the accuracy. With ``n`` questions and a
  share ``psi`` of them discordant, ``b - c`` has mean ``n * d`` and variance ``n * (psi - d^2)``
  for a true drop ``d``, so the test detects ``d = (z_alpha * sqrt(psi) + z_power *
  sqrt(psi - d^2)) / sqrt(n)`` (Connor 1987, solved by iteration). A drop adds its own flips to
  the churn, so ``psi`` is the observed discordant share plus ``d``, and at least ``3 / n``.
"""

from __future__ import annotations

import dataclasses
import math

from scipy import stats as sps


@dataclasses.dataclass(frozen=True)
class TestResult:
    test: str
    p_value: float
    drop: float
    """Estimated accuracy drop (baseline minus run); negative is an improvement."""
    detail: str


def mcnemar_one_sided(baseline: list[bool], run: list[bool]) -> TestResult:
    if len(baseline) != len(run):
        raise ValueError(f"paired test needs the same questions: {len(baseline)} vs {len(run)}")
    b = sum(1 for g, r in zip(baseline, run) if g and not r)
    c = sum(1 for g, r in zip(baseline, run) if r and not g)
    n = len(run)
    p = 1.0 if b + c == 0 else float(sps.binomtest(b, b + c, 0.5, alternative="greater").pvalue)
    drop = (b - c) / n if n else 0.0
    return TestResult("exact McNemar (paired, one-sided)", p, drop,
                      f"{b} right->wrong, {c} wrong->right of {n}")


def two_proportion_one_sided(p0: float, n0: int, p1: float, n1: int) -> TestResult:
    if n0 <= 0 or n1 <= 0:
        raise ValueError(f"two-proportion test needs n > 0 (got n0={n0}, n1={n1})")
    pooled = (p0 * n0 + p1 * n1) / (n0 + n1)
    se = math.sqrt(pooled * (1 - pooled) * (1 / n0 + 1 / n1))
    drop = p0 - p1
    if se == 0:
        p = 0.0 if drop > 0 else 1.0
    else:
        p = float(sps.norm.sf(drop / se))
    return TestResult("two-proportion z (pooled, one-sided)", p, drop,
                      f"baseline {p0:.4f} (n={n0}) vs run {p1:.4f} (n={n1})")


def min_detectable_drop(p0: float, n0: int, n1: int, alpha: float, power: float = 0.95) -> float:
    """Smallest true drop below ``p0`` that the aggregate test detects with ``power``.

    The test rejects when the observed drop exceeds ``z_alpha * se0`` (pooled standard error under
    no change); the observed drop is about normal with the true drop as mean and standard error
    ``se1`` (each proportion's own variance), so ``d = z_alpha * se0 + z_power * se1``, solved by
    fixed-point iteration.
    """
    if n0 <= 0 or n1 <= 0:
        return float("inf")
    p0 = min(max(p0, 1e-3), 1 - 1e-3)
    za, zb = sps.norm.isf(alpha), sps.norm.isf(1 - power)
    drop = 0.0
    for _ in range(100):
        p1 = min(max(p0 - drop, 1e-6), 1 - 1e-6)
        pooled = (p0 * n0 + p1 * n1) / (n0 + n1)
        se0 = math.sqrt(pooled * (1 - pooled) * (1 / n0 + 1 / n1))
        se1 = math.sqrt(p0 * (1 - p0) / n0 + p1 * (1 - p1) / n1)
        drop = za * se0 + zb * se1
    return drop


def min_detectable_drop_paired(n: int, discordant: int, alpha: float, power: float = 0.95) -> float:
    """Smallest true drop the paired test detects with ``power``, given ``discordant`` of the
    ``n`` questions changed correctness (module docstring)."""
    if n <= 0:
        return float("inf")
    churn = discordant / n
    za, zb = sps.norm.isf(alpha), sps.norm.isf(1 - power)
    drop = 0.0
    for _ in range(200):
        psi = min(1.0, max(churn + drop, 3.0 / n))
        drop = (za * math.sqrt(psi) + zb * math.sqrt(max(psi - drop * drop, 0.0))) / math.sqrt(n)
    return drop


def family_alpha(alpha: float, tests: int) -> float:
    """Bonferroni: each of ``tests`` one-sided tests at ``alpha / tests`` keeps the chance of any
    false alarm in the whole run (every level, comparison and metric) at most ``alpha``."""
    return alpha / max(tests, 1)
