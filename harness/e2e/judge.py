"""Verdicts for E2E levels: against the golden, and against the same run's lowest level.

Per level there are up to two comparisons (the golden; the run's lowest level), each one
one-sided test per metric. All tests of a run form one family: each is made at
``alpha / (comparisons in the run x metrics)`` (Bonferroni, ``stats.family_alpha``), so the
chance that a run with no change reports any regression stays at most ``alpha``.

Greedy outputs are compared too, where they must be equal:
- with the golden's outputs only when the golden's fingerprint (server build, model file,
  hardware: :mod:`harness.e2e.fingerprint`) matches this run's, since a golden's exact outputs
  hold only for what produced them; the golden then bounds the changed share
  (``judge.max_changed_fraction``);
- with the run's lowest level when the server's outputs must not depend on concurrency
  (``max_changed_across_levels``: 0 for llama.cpp's server, which serves one request at a time;
  not judged by default for batching servers such as vLLM). Changed outputs across levels are
  what high-concurrency regressions (padded-buffer slicing, batch-dependent kernels) break.

Verdicts: ``regression`` when a test is significant or more outputs changed than allowed;
``inconclusive`` when nothing is significant but the run could not have seen a ``max_drop``
accuracy drop (2 points unless the golden says otherwise; the paired test's detectable drop
counts the answers that changed, ``stats.min_detectable_drop_paired``) and no output-identity
check vouches for it; ``error`` when the level did not produce results, or when a ``--limit``
subset would be held against a golden that only knows its whole-set accuracy (the first
questions are not a random sample) unless that is accepted explicitly; otherwise ``pass``.
``Judgement.basis`` says, per comparison, what was compared and why.
"""

from __future__ import annotations

import dataclasses
from typing import Mapping

from harness.e2e import drift, fingerprint, stats
from harness.e2e.drift import DriftLimits
from harness.e2e.golden import DEFAULT_JUDGE, METRICS

ORDER = ("pass", "inconclusive", "regression", "error")
SNIPPET = 60


@dataclasses.dataclass
class Judgement:
    level: int
    verdict: str
    reasons: list[str]
    tests: list[dict] = dataclasses.field(default_factory=list)
    changes: list[dict] = dataclasses.field(default_factory=list)
    min_detectable_drop: float | None = None
    basis: list[str] = dataclasses.field(default_factory=list)
    drift: list[dict] = dataclasses.field(default_factory=list)
    """Per comparison with logprobs on both sides: the drift figures (harness.e2e.drift)."""


def worst(verdicts) -> str:
    verdicts = list(verdicts)
    return max(verdicts, key=ORDER.index) if verdicts else "error"


def first_divergence(a: str, b: str) -> int | None:
    if a == b:
        return None
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return min(len(a), len(b))


def question_diff(base: list[dict], run: list[dict], against: str, level: int) -> list[dict]:
    """One row per question: correctness flips and where the greedy outputs first diverge."""
    by_id = {q["doc_id"]: q for q in base}
    rows = []
    for q in run:
        g = by_id[q["doc_id"]]
        row = {"level": level, "against": against, "doc_id": q["doc_id"]}
        for m in METRICS:
            row[f"base_{m}"], row[f"run_{m}"] = g[m], q[m]
            row[f"flip_{m}"] = ("right->wrong" if g[m] and not q[m] else
                                "wrong->right" if q[m] and not g[m] else "")
        if "response" in g and g["response"] is not None:
            pos = first_divergence(g["response"], q["response"])
            row["output_changed"] = pos is not None
            row["first_divergence"] = pos
            if pos is not None:
                row["base_snippet"] = g["response"][pos:pos + SNIPPET]
                row["run_snippet"] = q["response"][pos:pos + SNIPPET]
        rows.append(row)
    return rows


def _paired_base(golden: dict, run: list[dict]) -> list[dict] | str:
    """The golden's per-question records for the run's questions, or why they cannot be used."""
    by_id = {q["doc_id"]: q for q in golden["per_question"]}
    missing = [q["doc_id"] for q in run if q["doc_id"] not in by_id]
    if missing:
        return f"golden has no per-question result for doc(s) {missing[:5]}"
    bad = [q["doc_id"] for q in run
           if q.get("doc_hash") and by_id[q["doc_id"]].get("doc_hash")
           and q["doc_hash"] != by_id[q["doc_id"]]["doc_hash"]]
    if bad:
        return f"golden's questions differ from the run's (doc_hash mismatch at {bad[:5]})"
    return [by_id[q["doc_id"]] for q in run]


def comparisons(results: list[dict], golden: dict | None) -> int:
    """How many comparisons a run makes (the size of its test family, with the metrics)."""
    ok = [r for r in results if not r.get("error")]
    lowest = min((r["level"] for r in ok), default=None)
    return sum((golden is not None) + (r["level"] != lowest) for r in ok) or 1


def judge_level(result: dict, golden: dict | None, lowest: dict | None, *,
                run_fingerprint: dict | None = None,
                max_changed_across_levels: float | None = None, family: int = 1,
                accept_aggregate_subset: bool = False,
                drift_limits: Mapping[str, DriftLimits] | None = None) -> Judgement:
    """``family``: the number of comparisons in the whole run (``comparisons``);
    ``drift_limits``: the measured noise (``drift.limits_for``) for the comparison with the
    ``"golden"`` and with the run's lowest ``"level"``; a missing one: drift not judged."""
    level = result["level"]
    if result.get("error"):
        return Judgement(level, "error", [result["error"]])
    settings = {**DEFAULT_JUDGE, **((golden or {}).get("judge") or {})}
    comparisons = []
    reasons: list[str] = []
    basis: list[str] = []
    run_q = result["per_question"]
    if golden is not None:
        if golden.get("per_question"):
            base = _paired_base(golden, run_q)
            if isinstance(base, str):
                return Judgement(level, "error", [f"cannot compare with golden "
                                                  f"{golden['name']}: {base}; record a golden for "
                                                  "these questions (`harness golden record`)"])
            limit = settings["max_changed_fraction"]
            differs = fingerprint.differences(golden.get("fingerprint"), run_fingerprint)
            if limit is None:
                basis.append("golden: paired McNemar test; outputs not judged (the golden sets "
                             "no max_changed_fraction)")
            elif differs:
                basis.append("golden: paired McNemar test; exact outputs not required, the "
                             "golden was produced elsewhere (" + "; ".join(differs[:3]) + ")")
                limit = None
            else:
                basis.append(f"golden: paired McNemar test and exact outputs (fingerprint "
                             f"matches; at most {limit:.0%} may change)")
            comparisons.append(("golden", base, None, limit, golden.get("logprobs")))
        else:
            n_gold = min(v["n"] for v in golden["metrics"].values())
            if result["n"] != n_gold and not accept_aggregate_subset:
                return Judgement(level, "error", [
                    f"golden {golden['name']} has only its accuracy over {n_gold} questions, and "
                    f"this run answered {result['n']} (--limit): the first questions are not a "
                    "random sample of the set, so the two accuracies are not comparable. Run "
                    "without --limit, use a golden with per-question results (`harness golden "
                    "record`), or pass --accept-aggregate-golden to compare anyway"])
            basis.append("golden: one-sided two-proportion test on published accuracy (no "
                         "per-question results)" + (f"; this run answered {result['n']} of its "
                                                    f"{n_gold} questions (accepted)"
                                                    if result["n"] != n_gold else ""))
            comparisons.append(("golden", None, golden["metrics"], None, golden.get("logprobs")))
    if lowest is not None and lowest["level"] != level and not lowest.get("error"):
        against = f"level {lowest['level']}"
        basis.append(f"{against} of this run: paired McNemar test; " + (
            "outputs not judged across levels (this server may batch requests)"
            if max_changed_across_levels is None else
            f"exact outputs (at most {max_changed_across_levels:.0%} may change: this server's "
            "outputs must not depend on concurrency)"))
        comparisons.append((against, lowest["per_question"], None, max_changed_across_levels,
                            lowest.get("logprobs")))
    if not comparisons:
        return Judgement(level, "inconclusive", ["no golden and no lower level to compare with; "
                                                 "pass --golden NAME"] + _logprobs_failed(result))
    judgement = Judgement(level, "pass", reasons, basis=basis)
    mdes, identity_ok, drift_ok = [], None, None
    for against, base, aggregate, limit, ref_logprobs in comparisons:
        ok = _judge_drift(judgement, against, ref_logprobs, result,
                          (drift_limits or {}).get("golden" if against == "golden" else "level"),
                          golden if against == "golden" else None)
        drift_ok = _vouch(drift_ok, ok)
        alpha = stats.family_alpha(settings["alpha"], family * (
            len(METRICS) if aggregate is None else len(aggregate)))
        for m in METRICS:
            if base is not None:
                before, after = [bool(q[m]) for q in base], [bool(q[m]) for q in run_q]
                res = stats.mcnemar_one_sided(before, after)
                changed = sum(x != y for x, y in zip(before, after))
                mdes.append(stats.min_detectable_drop_paired(len(after), changed, alpha))
            elif m in aggregate:
                p0, n0 = aggregate[m]["acc"], aggregate[m]["n"]
                res = stats.two_proportion_one_sided(p0, n0, result["metrics"][m]["acc"], result["n"])
                mdes.append(stats.min_detectable_drop(p0, n0, result["n"], alpha))
            else:
                continue
            significant = res.p_value < alpha
            judgement.tests.append({"level": level, "against": against, "metric": m,
                                    "test": res.test, "p_value": res.p_value, "alpha": alpha,
                                    "drop": res.drop, "detail": res.detail,
                                    "significant": significant})
            if significant:
                reasons.append(f"{m} vs {against}: drop {res.drop:+.3f} ({res.detail}), "
                               f"p={res.p_value:.2g} < {alpha:.2g}")
        if base is not None:
            rows = question_diff(base, run_q, against, level)
            judgement.changes += rows
            judged = [r for r in rows if "output_changed" in r]
            if judged and limit is not None:
                changed = [r for r in judged if r["output_changed"]]
                frac = len(changed) / len(judged)
                ok = frac <= limit
                identity_ok = ok if identity_ok is None else identity_ok and ok
                if not ok:
                    first = min(changed, key=lambda r: r["doc_id"])
                    reasons.append(
                        f"greedy outputs changed vs {against} on {len(changed)}/{len(judged)} "
                        f"questions (allowed {limit:.0%}); first: doc {first['doc_id']} at char "
                        f"{first['first_divergence']}: {first['base_snippet']!r} -> "
                        f"{first['run_snippet']!r}")
    judgement.min_detectable_drop = max(mdes) if mdes else None
    if reasons:
        judgement.verdict = "regression"
    elif result.get("logprobs_failed"):
        judgement.verdict = "inconclusive"
        reasons.extend(_logprobs_failed(result))
    elif not (identity_ok or drift_ok) and (judgement.min_detectable_drop is None
                              or judgement.min_detectable_drop > settings["max_drop"]):
        judgement.verdict = "inconclusive"
        reasons.append(f"too few questions: the smallest drop this run could detect with 95% "
                       f"power is {judgement.min_detectable_drop:.3f} > max_drop "
                       f"{settings['max_drop']}, and neither exact outputs nor logprob drift "
                       "vouch for this level; raise --limit, or record a golden on this machine from a trusted "
                       "build (`harness golden record --like GOLDEN --name NAME ...`) so that "
                       "outputs can be compared exactly")
    return judgement


def _logprobs_failed(result: dict) -> list[str]:
    if not result.get("logprobs_failed"):
        return []
    return ["could not test: the logprob pass failed, so drift at this level is unknown ("
            f"{result.get('logprobs_error')}); a server whose logprobs break is not "
            "\"identical\". Fix the server, or pass --logprobs 0 to judge without drift"]


def _vouch(so_far: bool | None, ok: bool | None) -> bool | None:
    """Drift's say over a level from its comparisons: False if any drifted beyond its limits,
    else True if any vouched, else None. A comparison that could not be judged (its basis line
    says why) adds nothing: it neither overturns another's vouching nor vouches itself."""
    if so_far is False or ok is False:
        return False
    return True if so_far or ok else None


def _judge_drift(judgement: Judgement, against: str, reference: dict | None, result: dict,
                 limits: DriftLimits | None, golden: dict | None) -> bool | None:
    """Logprob drift of this level against ``reference`` (question id -> compact record):
    True or False when judged, None when it could not be (the basis line says why)."""
    what = "the golden" if golden is not None else against
    why_not = None
    if limits is None:
        why_not = "drift not judged (no limits for this server kind)"
    elif not result.get("logprobs"):
        why_not = ("drift not judged: this run has no logprobs ("
                   + (result.get("logprobs_error") or "not recorded") + ")")
    elif not reference:
        why_not = (f"drift not judged: {what} carries no logprobs"
                   + (" (an accuracy-only reference; record one with logprobs: "
                      "`harness golden record --like NAME --name NEW ...`)"
                      if golden is not None else ""))
    if why_not is None:
        pairs = drift.by_question(result["logprobs"], reference)
        asked = {str(q["doc_id"]) for q in result.get("per_question") or []} or set(result["logprobs"])
        covered = asked & {str(q) for q, _, _ in pairs}
        if covered != asked:
            why_not = (f"drift not judged: logprobs on both sides for {len(covered)} of this "
                       f"run's {len(asked)} questions (part of the questions cannot vouch for "
                       "the level)")
    if why_not is not None:
        judgement.basis.append(f"{against}: {why_not}")
        return None
    level = drift.judge(pairs, limits, f"logprob drift vs {against}")
    judgement.drift.append({"against": against, "vouches": limits.vouches,
                            **dataclasses.asdict(level)})
    judgement.basis.append(
        f"{against}: logprob drift over {level.questions} questions ({level.identical} "
        f"identical; limits: flips within {limits.near_tie:g} nats are near-ties, "
        f"|delta logprob| <= {limits.max_delta:g}, confident flips <= "
        f"{limits.max_confident_share:.0%}; {limits.source})"
        + ("" if limits.vouches else "; within these limits it cannot vouch for the level"))
    judgement.reasons.extend(level.reasons)
    if level.verdict != "pass":
        return False
    return True if limits.vouches else None
