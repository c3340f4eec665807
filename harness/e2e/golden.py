"""Golden baselines: what a run is judged against, with where the numbers came from.

A golden file is JSON (``golden/gsm8k/<name>.json``)::

    schema, name, model, server {kind, command, env, settings}, kernel_settings, hardware,
    fingerprint {server_kind, server_version, model_sha256, cpu, ...} (optional), date, source,
    task {name, num_fewshot, limit, gen_kwargs, test_sha256},
    metrics {"strict-match": {acc, stderr, n}, "flexible-extract": {...}},
    judge {alpha, max_drop, max_changed_fraction, drift?}, per_question [ {doc_id, doc_hash,
    strict-match, flexible-extract, response} ] or null, logprobs {doc_id: record} or absent,
    notes

``per_question`` enables the paired test and the output diff; published numbers have none.
``judge.max_changed_fraction`` (None: not judged) bounds how many greedy outputs may differ
from the golden's; ``max_drop`` is the accuracy drop a run must be able to detect to be
conclusive. ``logprobs`` (the greedy continuations with per-token logprobs and top-N
alternatives) lets a run be judged by drift (harness.e2e.drift) whatever machine recorded it;
a golden without it is an accuracy-only reference. ``judge.drift`` overrides the server kind's
measured drift limits.
"""

from __future__ import annotations

import datetime
import json
import pathlib
from typing import Any

from harness.e2e import golden_schema
from harness.e2e.drift import Continuation, DriftError, DriftLimits

METRICS = golden_schema.METRICS
DEFAULT_JUDGE = {"alpha": 0.01, "max_drop": 0.02, "max_changed_fraction": None}
GOLDEN_DIR = pathlib.Path(__file__).resolve().parents[2] / "golden" / "gsm8k"


class GoldenError(ValueError):
    pass


def _fail(path, msg: str):
    raise GoldenError(f"golden file {path}: {msg}. Fix the file (see golden/README.md for the "
                      "format) or regenerate it with `harness golden update`.")


def validate(data: Any, path: Any = "<memory>") -> dict:
    """``data`` checked against the one golden schema (harness.e2e.golden_schema), with the judge
    defaults filled in; a GoldenError naming every bad field otherwise."""
    problems = golden_schema.check(data)
    if problems:
        _fail(path, "; ".join(problems[:6]) + (f"; and {len(problems) - 6} more"
                                               if len(problems) > 6 else ""))
    judge = {**DEFAULT_JUDGE, **(data.get("judge") or {})}
    if judge.get("drift") is not None:
        try:
            DriftLimits.from_settings(judge["drift"], "golden")
        except (TypeError, ValueError) as exc:
            _fail(path, f"judge.drift: {exc}")
    for qid, rec in (data.get("logprobs") or {}).items():
        try:
            Continuation.from_compact(rec)
        except DriftError as exc:
            _fail(path, f"logprobs[{qid!r}]: {exc}")
    return {**data, "judge": judge}


def resolve(name_or_path: str) -> pathlib.Path:
    path = pathlib.Path(name_or_path)
    if path.suffix == ".json" and path.exists():
        return path
    candidate = GOLDEN_DIR / f"{name_or_path}.json"
    if candidate.exists():
        return candidate
    known = ", ".join(sorted(p.stem for p in GOLDEN_DIR.glob("*.json"))) or "none"
    raise GoldenError(f"no golden file {name_or_path!r}; known: {known}. Pass a path or one of "
                      "these names, or create one with `harness golden update`.")


def load(name_or_path: str) -> dict:
    path = resolve(name_or_path)
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        _fail(path, f"not valid JSON ({exc})")
    return validate(data, path)


def from_level(level: dict, meta: dict, name: str, source: str, notes: str = "",
               judge: dict | None = None, levels: list[dict] | None = None) -> dict:
    """A golden file built from one level of an E2E run (its results and provenance); with
    ``levels`` (every level of the run), each one's record under ``levels`` too."""
    per_q = level["per_question"]
    return validate({
        "schema": 1, "name": name, "model": meta["model"], "server": meta["server"],
        "kernel_settings": meta.get("kernel_settings"), "hardware": meta.get("hardware", ""),
        "fingerprint": meta.get("fingerprint"),
        "date": datetime.date.today().isoformat(),
        "source": source or f"harness e2e run {meta.get('run_dir', '')}, level {level['level']}",
        "task": meta["task"],
        "metrics": _metrics(level),
        "judge": {**DEFAULT_JUDGE, **(judge or {})},
        "per_question": per_q, "notes": notes,
        "logprobs": level.get("logprobs"),
        "recorded_from": {"concurrency": level["level"], "lm_eval_version": meta.get("lm_eval_version")},
        **({"levels": {str(lv["level"]): {"metrics": _metrics(lv), "per_question": lv["per_question"],
                                          "logprobs": lv.get("logprobs")} for lv in levels}}
           if levels else {}),
    })


def _metrics(level: dict) -> dict:
    return {m: {"acc": level["metrics"][m]["acc"], "stderr": level["metrics"][m]["stderr"],
                "n": level["n"]} for m in METRICS}


def at_level(golden: dict | None, level: int) -> dict | None:
    """The golden as level ``level`` of a run is judged against it: its record of that level
    where it has one (``levels``), else its own (the lowest level it was recorded at)."""
    if golden is None or str(level) not in (golden.get("levels") or {}):
        return golden
    return {**golden, **golden["levels"][str(level)], "compared_level": level}


def write(golden: dict, path: pathlib.Path | None = None) -> pathlib.Path:
    path = path or GOLDEN_DIR / f"{golden['name']}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(dumps(golden))
    return path


def dumps(golden: dict) -> str:
    """JSON, indented, with one line per question's logprob record (a golden stays readable in
    a diff and a few KB per question)."""
    lines: list[str] = []

    def compact(records):
        if not records:
            return records
        out = {}
        for q, rec in records.items():
            out[str(q)] = f"@@record{len(lines)}@@"
            lines.append(json.dumps(rec, separators=(",", ":")))
        return out

    shown = {**golden, "logprobs": compact(golden.get("logprobs"))}
    if golden.get("levels"):
        shown["levels"] = {lv: {**rec, "logprobs": compact(rec.get("logprobs"))}
                           for lv, rec in golden["levels"].items()}
    if "logprobs" not in golden:
        shown.pop("logprobs")
    text = json.dumps(shown, indent=1)
    for i, line in enumerate(lines):
        text = text.replace(f'"@@record{i}@@"', line, 1)
    return text + "\n"
