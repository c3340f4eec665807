"""The one schema of a golden file (harness.e2e.golden), shared by ``harness golden check`` and
every E2E run: types (strict: ``"0.02"`` is not a number, ``"false"`` not a verdict), ranges,
per-question fields, and logprobs present for every question or for none, all finite.

A golden that passes here cannot crash the judge or vouch with part of its data: a record for 1
question of 20 would otherwise stand for the level, and a NaN logprob would compare equal to
every other NaN-turned-number. :func:`check` returns the first problems as ``field: what``.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

METRICS = ("strict-match", "flexible-extract")

Share = Annotated[float, Field(ge=0, le=1)]
Correct = bool | Literal[0, 1]
"""A question's score: lm-eval writes 0 or 1."""


class _Strict(BaseModel):
    model_config = ConfigDict(strict=True, allow_inf_nan=False, extra="allow",
                              populate_by_name=True)


class _Closed(_Strict):
    model_config = ConfigDict(extra="forbid")


class Metric(_Strict):
    acc: Share
    stderr: Annotated[float, Field(ge=0)] | None = None
    n: Annotated[int, Field(gt=0)]


class Task(_Strict):
    num_fewshot: Annotated[int, Field(ge=0)]
    limit: Annotated[int, Field(gt=0)] | None = None
    gen_kwargs: dict[str, Any] | None = None


class DriftSettings(_Closed):
    near_tie: Annotated[float, Field(ge=0)]
    max_delta: Annotated[float, Field(ge=0)]
    max_confident_share: Share
    vouches: bool = True
    source: str | None = None
    measured: dict[str, float] | None = None
    """What the clean reruns showed (harness.e2e.noise), kept beside the limits set from it."""


class Judge(_Closed):
    alpha: Annotated[float, Field(gt=0, lt=0.5)] = 0.01
    max_drop: Annotated[float, Field(gt=0, lt=1)] = 0.02
    max_changed_fraction: Share | None = None
    drift: DriftSettings | None = None


class Question(_Strict):
    doc_id: Annotated[int, Field(ge=0)]
    doc_hash: str | None = None
    response: str | None = None
    strict_match: Correct | None = Field(None, alias="strict-match")
    flexible_extract: Correct | None = Field(None, alias="flexible-extract")


class LogprobRecord(_Closed):
    """One greedy continuation (harness.e2e.drift.Continuation.compact): tokens, the chosen
    tokens' logprobs and the top-N alternatives, one each per token."""
    t: list[str]
    l: list[Annotated[float, Field(le=0)]]  # noqa: E741 (the compact record's key)
    n: list[dict[str, float]]

    @model_validator(mode="after")
    def _one_per_token(self):
        if not len(self.t) == len(self.l) == len(self.n):
            raise ValueError(f"{len(self.t)} tokens, {len(self.l)} logprobs and {len(self.n)} "
                             "top-N sets: a record needs one of each per token (truncated?)")
        return self


def _consistent(metrics: dict, questions: list[Question], logprobs: dict | None,
                where: str = "") -> None:
    for name, metric in metrics.items():
        if questions and metric.n != len(questions):
            raise ValueError(f"{where}metrics.{name}.n is {metric.n} but {where}per_question has "
                             f"{len(questions)} entries")
        attr = name.replace("-", "_")
        lacking = [q.doc_id for q in questions if getattr(q, attr) is None]
        if lacking:
            raise ValueError(f"{where}per_question: doc(s) {lacking[:5]} have no {name!r} score "
                             "(0 or 1)")
    ids = [q.doc_id for q in questions]
    if len(set(ids)) != len(ids):
        raise ValueError(f"{where}per_question: a doc_id appears twice")
    if logprobs is not None:
        if not questions:
            raise ValueError(f"{where}logprobs: a golden with logprobs needs per_question (which "
                             "questions they belong to)")
        have, want = set(logprobs), {str(i) for i in ids}
        if have != want:
            missing, extra = sorted(want - have, key=int), sorted(have - want)
            raise ValueError(
                f"{where}logprobs: records for {len(have & want)} of {len(want)} questions "
                f"(missing {missing[:5]}{', extra ' + str(extra[:5]) if extra else ''}); "
                "logprobs must cover every question or be absent, or part of the questions "
                "would vouch for the whole level")


class LevelRecord(_Strict):
    """One concurrency level of a golden recorded at several (``levels``)."""
    metrics: dict[Literal["strict-match", "flexible-extract"], Metric] = Field(min_length=1)
    per_question: Annotated[list[Question], Field(min_length=1)]
    logprobs: dict[str, LogprobRecord] | None = None


class Golden(_Strict):
    name: str
    model: str
    server: dict[str, Any]
    hardware: str
    date: str
    source: str
    task: Task
    metrics: dict[Literal["strict-match", "flexible-extract"], Metric] = Field(min_length=1)
    judge: Judge = Judge()
    fingerprint: dict[str, Any] | None = None
    per_question: Annotated[list[Question], Field(min_length=1)] | None = None
    logprobs: dict[str, LogprobRecord] | None = None
    levels: dict[str, LevelRecord] | None = None
    """Concurrency level -> its record, for a server whose outputs depend on the batch
    (harness.e2e.golden.at_level); the top level's record is the lowest level's."""

    @model_validator(mode="after")
    def _consistent(self):
        _consistent(self.metrics, self.per_question or [], self.logprobs)
        for level, rec in (self.levels or {}).items():
            if not level.isdigit() or int(level) < 1:
                raise ValueError(f"levels: {level!r} is not a concurrency level (1, 2, ...)")
            _consistent(rec.metrics, rec.per_question, rec.logprobs, f"levels[{level}].")
            if (rec.logprobs is None) != (self.logprobs is None):
                raise ValueError(f"levels[{level}]: logprobs at every level or at none")
        return self


def _where(data: Any, loc: tuple) -> str:
    """The field a pydantic error location names, as ``judge.alpha`` or ``per_question[3].x``
    (the location's union and validator tags, which are not fields, left out)."""
    out, here = "", data
    for part in loc:
        if isinstance(here, list) and isinstance(part, int) and part < len(here):
            out, here = out + f"[{part}]", here[part]
        elif isinstance(here, dict) and part in here:
            out, here = out + ("." if out else "") + str(part), here[part]
        elif isinstance(here, dict) and not isinstance(part, int) and "[" not in str(part) \
                and str(part) not in _TYPE_TAGS:
            out, here = out + ("." if out else "") + str(part), None
            break
    return out or "(top level)"


_TYPE_TAGS = {"bool", "int", "float", "str", "list", "dict", "none", "nullable"}


def check(data: Any) -> list[str]:
    """The problems of a golden as ``field: what (got VALUE)``; empty when it is valid."""
    if not isinstance(data, dict):
        return ["(top level): must be a JSON object"]
    try:
        Golden.model_validate(data)
    except ValidationError as exc:
        out: dict[str, str] = {}
        for err in exc.errors(include_url=False):
            where = _where(data, err["loc"])
            got = "" if err["type"] in ("missing", "value_error") else f" (got {err.get('input')!r})"
            msg = err["msg"].removeprefix("Value error, ")
            out.setdefault(where, msg if where == "(top level)" and not got else
                           f"{where}: {msg}{got}")
        return list(out.values())
    return []
