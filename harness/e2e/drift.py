"""Per-token log-probability drift between two greedy continuations of the same prompt.

The comparison follows vLLM's ``check_logprobs_close``: the two continuations agree token for
token up to a position where they diverge; there each chosen token must be among the other's
top-N alternatives. Beyond it, what moves first when a kernel loses precision is measured:

- over the agreed tokens, the largest |delta logprob| of the chosen token and the overlap of
  the two top-N sets (a precision loss moves logprobs long before it flips a greedy choice);
- at the divergence, the margin by which each side preferred its own token over the other's:
  a flip between near-ties (margin below ``near_tie``) is rounding noise, a confident flip (or
  a token outside the other's top-N) is a regression.

The records are what the OpenAI completions API returns with ``logprobs=N``
(``tokens``, ``token_logprobs``, ``top_logprobs``), kept compactly (:meth:`Continuation.compact`).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Iterable, Mapping, Sequence

DIGITS = 4
"""Logprobs are kept to 1e-4: far below any threshold, small in a golden file."""


class DriftError(ValueError):
    """A logprob record that cannot be compared (malformed, or from another prompt)."""


@dataclasses.dataclass(frozen=True)
class Continuation:
    tokens: tuple[str, ...]
    logprobs: tuple[float, ...]
    """The chosen token's logprob at each position."""
    top: tuple[Mapping[str, float], ...]
    """The top-N alternatives at each position, token -> logprob."""

    def __post_init__(self) -> None:
        if not (len(self.tokens) == len(self.logprobs) == len(self.top)):
            raise DriftError(f"a continuation needs one logprob and one top-N set per token: "
                             f"{len(self.tokens)} tokens, {len(self.logprobs)} logprobs, "
                             f"{len(self.top)} top-N sets")

    @classmethod
    def from_openai(cls, logprobs: Mapping[str, Any] | None,
                    text: str | None = None) -> "Continuation":
        """From a completions choice's ``logprobs`` object (and its ``text``, to see truncation).
        A server that returned none, logprobs that are NaN or +inf (or -inf for a chosen token),
        or tokens that cover less than the returned text is an error naming the problem."""
        if not logprobs or "tokens" not in logprobs:
            raise DriftError("the server returned no logprobs; ask /v1/completions with "
                             "logprobs=N (vLLM and llama.cpp's server both support it)")
        tokens = [str(t) for t in logprobs["tokens"] or []]
        chosen = list(logprobs.get("token_logprobs") or [])
        top = logprobs.get("top_logprobs")
        top = [{} for _ in tokens] if top is None else list(top)
        if not len(tokens) == len(chosen) == len(top):
            raise DriftError(f"truncated logprobs: {len(tokens)} tokens, {len(chosen)} logprobs, "
                             f"{len(top)} top-N sets")
        if text is not None and len("".join(tokens)) < len(text):
            raise DriftError(f"truncated logprobs: the tokens cover {len(''.join(tokens))} of the "
                             f"{len(text)} characters of the returned text")
        return cls(tuple(tokens), tuple(_logprob(x, chosen=True) for x in chosen),
                   tuple({str(k): _logprob(v) for k, v in (t or {}).items()} for t in top))

    def compact(self) -> dict:
        return {"t": list(self.tokens), "l": [round(x, DIGITS) for x in self.logprobs],
                "n": [{k: round(v, DIGITS) for k, v in t.items()} for t in self.top]}

    @classmethod
    def from_compact(cls, data: Mapping[str, Any]) -> "Continuation":
        try:
            return cls(tuple(data["t"]), tuple(float(x) for x in data["l"]),
                       tuple(dict(t) for t in data["n"]))
        except (KeyError, TypeError, ValueError) as exc:
            raise DriftError(f"malformed logprob record ({type(exc).__name__}: {exc}); "
                             "re-record it with `harness golden record`") from exc


IMPOSSIBLE = -1e9
"""An alternative's -inf (an impossible token), kept as a finite number."""


def _logprob(x: Any, chosen: bool = False) -> float:
    """A logprob from a server: NaN, +inf, a missing value, and -inf for a token the server
    chose, are errors (the server's arithmetic broke); an alternative's -inf is IMPOSSIBLE."""
    value = float(x) if isinstance(x, (int, float)) and not isinstance(x, bool) else math.nan
    if math.isfinite(value) and value <= 1e-3:
        return value
    if value == -math.inf and not chosen:
        return IMPOSSIBLE
    raise DriftError(f"the server returned a logprob of {x!r}"
                     + (" for a token it chose" if chosen else "")
                     + ": not a finite log-probability (<= 0); its arithmetic is broken, so this "
                       "level cannot be judged")


@dataclasses.dataclass(frozen=True)
class Drift:
    agreed: int
    """Tokens equal in both continuations before the first divergence."""
    max_delta: float
    """Largest |delta logprob| of the chosen token over the agreed tokens."""
    overlap: float
    """Mean share of top-N tokens both sides list, over the agreed tokens (1: same sets)."""
    divergence: int | None
    flip: str
    """``none`` (no divergence), ``near-tie``, ``confident`` or ``outside-top-n``."""
    margin: float | None
    """At the divergence: how much more either side preferred its own token (the larger)."""


def compare(a: Continuation, b: Continuation, near_tie: float) -> Drift:
    deltas, overlaps = [], []
    divergence = None
    for i, (ta, tb) in enumerate(zip(a.tokens, b.tokens)):
        if ta != tb:
            divergence = i
            break
        deltas.append(abs(a.logprobs[i] - b.logprobs[i]))
        sa, sb = set(a.top[i]), set(b.top[i])
        overlaps.append(len(sa & sb) / len(sa | sb) if sa | sb else 1.0)
    if divergence is None and len(a.tokens) != len(b.tokens):
        divergence = min(len(a.tokens), len(b.tokens))  # one stopped where the other went on
    flip, margin = "none", None
    if divergence is not None:
        flip, margin = _flip(a, b, divergence, near_tie)
    return Drift(len(deltas), max(deltas, default=0.0),
                 sum(overlaps) / len(overlaps) if overlaps else 1.0, divergence, flip, margin)


def _flip(a: Continuation, b: Continuation, i: int, near_tie: float) -> tuple[str, float | None]:
    if i >= len(a.tokens) or i >= len(b.tokens):
        return "confident", None  # an end of text against a token: no logprob to weigh
    ta, tb = a.tokens[i], b.tokens[i]
    if tb not in a.top[i] or ta not in b.top[i]:
        return "outside-top-n", None
    margin = max(a.logprobs[i] - a.top[i][tb], b.logprobs[i] - b.top[i][ta])
    return ("near-tie" if margin <= near_tie else "confident"), margin


@dataclasses.dataclass(frozen=True)
class DriftLimits:
    """What clean reruns of one server kind were measured to stay within."""
    near_tie: float
    """A flip whose margin is at most this (nats) is noise."""
    max_delta: float
    """The largest |delta logprob| of an agreed token that a clean rerun showed."""
    max_confident_share: float
    """Share of questions that may diverge confidently (0 where reruns never did)."""
    source: str
    """Where the figures come from (runs, machine, date)."""
    vouches: bool = True
    """Whether passing within these limits stands for "no regression": only where they are
    tight enough to see one (measured same-build noise), not where noise is as large as the
    regressions the gate is for."""

    @classmethod
    def from_settings(cls, settings: Mapping[str, Any], source: str) -> "DriftLimits":
        """A golden's own ``judge.drift`` (near_tie, max_delta, max_confident_share)."""
        unknown = set(settings) - {"near_tie", "max_delta", "max_confident_share", "source",
                                   "vouches", "measured"}
        if unknown:
            raise ValueError(f"unknown key(s) {sorted(unknown)}; use near_tie, max_delta, "
                             "max_confident_share, vouches, source")
        values = {k: float(settings[k]) for k in ("near_tie", "max_delta", "max_confident_share")}
        if any(v < 0 for v in values.values()):
            raise ValueError(f"limits must be >= 0, got {values}")
        return cls(**values, source=str(settings.get("source") or source),
                   vouches=bool(settings.get("vouches", True)))


SAME_BUILD, OTHER_BUILD = "same build", "another build"
"""How a reference relates to the run: the same server build, model file and kernel selection
(the run's own lowest level; a golden whose fingerprint says so, harness.e2e.fingerprint.
same_build), or not (a golden from another build or instruction set, or one that cannot tell)."""

MEASURED: dict[tuple[str, str], DriftLimits] = {
    ("llama-cpp", SAME_BUILD): DriftLimits(
        near_tie=0.01, max_delta=0.01, max_confident_share=0.0,
        source="llama.cpp, same build: clean reruns, 1 vs 2 threads, n_batch 64 vs 512 and "
               "another host (16 cores) gave identical logprobs (SmolLM2-135M Q4_1, up to 28 "
               "prompts, 2026-11-26; docs/e2e-drift.md); 0.01 leaves room for the records' 1e-4 "
               "rounding only"),
    ("llama-cpp", OTHER_BUILD): DriftLimits(
        near_tie=1.0, max_delta=1.0, max_confident_share=0.0, vouches=False,
        source="llama.cpp, another build: an AVX-512 build against the AVX2 one moved logprobs "
               "by up to 0.19 and flipped 5 of 8 continuations at margins up to 0.24 nats, as "
               "much as a q8_0 K cache does (docs/e2e-drift.md): only gross drift is judged"),
}
"""Limits per (server kind, relation), from measured noise (docs/e2e-drift.md has the runs)."""

UNMEASURED = DriftLimits(
    near_tie=1.0, max_delta=math.inf, max_confident_share=0.0, vouches=False,
    source="not measured for this server kind: only flips where a side preferred its token by "
           "more than 1 nat (e-fold) or that leave the other's top-N count; logprob deltas are "
           "not judged. Measure clean reruns and set judge.drift in the golden")
"""vLLM's own backend comparisons (``check_logprobs_close``) accept any flip inside the other's
top-N; a flip by more than an e-fold preference is beyond what batch-variant bf16 reductions
move a logit by, so it counts, while deltas need measured noise before they may."""


def limits_for(server_kind: str, relation: str,
               golden: Mapping[str, Any] | None = None) -> DriftLimits:
    """The golden's own ``judge.drift`` where it has one (for comparisons with it), else the
    measured limits of this server kind and relation."""
    own = ((golden or {}).get("judge") or {}).get("drift")
    if own:
        return DriftLimits.from_settings(own, f"golden {golden.get('name')}'s judge.drift")
    return MEASURED.get((server_kind, relation), UNMEASURED)


@dataclasses.dataclass
class LevelDrift:
    verdict: str
    """``pass`` or ``regression``."""
    reasons: list[str]
    questions: int
    identical: int
    near_tie: int
    confident: int
    worst_delta: float
    mean_overlap: float
    worst: list[dict]
    """The questions that drifted most, for the report."""


def judge(pairs: Iterable[tuple[Any, Continuation, Continuation]], limits: DriftLimits,
          label: str) -> LevelDrift:
    """``pairs``: (question id, reference continuation, this run's) for every question."""
    rows = []
    for qid, ref, new in pairs:
        rows.append((qid, compare(ref, new, limits.near_tie)))
    if not rows:
        raise DriftError(f"{label}: no question has logprobs on both sides to compare")
    confident = [(q, d) for q, d in rows if d.flip in ("confident", "outside-top-n")]
    near = [(q, d) for q, d in rows if d.flip == "near-tie"]
    worst_delta = max(d.max_delta for _, d in rows)
    reasons = []
    share = len(confident) / len(rows)
    if share > limits.max_confident_share:
        reasons.append(f"{label}: {len(confident)} of {len(rows)} continuations flip a confident "
                       f"choice (allowed {limits.max_confident_share:.0%}; first: question "
                       f"{confident[0][0]} at token {confident[0][1].divergence})")
    if worst_delta > limits.max_delta:
        q, d = max(rows, key=lambda r: r[1].max_delta)
        reasons.append(f"{label}: a chosen token's logprob moved by {worst_delta:.3g} before any "
                       f"divergence (question {q}; the limit is {limits.max_delta:.3g}, from "
                       "measured noise: see the basis)")
    ranked = sorted(rows, key=lambda r: (r[1].flip in ("confident", "outside-top-n"),
                                         r[1].max_delta), reverse=True)
    return LevelDrift("regression" if reasons else "pass", reasons, len(rows),
                      sum(d.divergence is None for _, d in rows), len(near), len(confident),
                      worst_delta, sum(d.overlap for _, d in rows) / len(rows),
                      [{"question": q, **dataclasses.asdict(d)} for q, d in ranked[:5]])


def by_question(records: Mapping[Any, Mapping[str, Any]],
                other: Mapping[Any, Mapping[str, Any]]) -> list[tuple[Any, Continuation,
                                                                       Continuation]]:
    """The questions both record sets hold, as comparable pairs (compact records)."""
    common = [q for q in records if q in other]
    return [(q, Continuation.from_compact(records[q]), Continuation.from_compact(other[q]))
            for q in common]


def summary(levels: Sequence[LevelDrift]) -> str:
    return "; ".join(f"{lv.identical}/{lv.questions} identical, {lv.near_tie} near-tie and "
                     f"{lv.confident} confident flips, max |delta| {lv.worst_delta:.3g}"
                     for lv in levels)
