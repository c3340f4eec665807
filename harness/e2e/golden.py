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

from harness.e2e.drift import Continuation, DriftError, DriftLimits

METRICS = ("strict-match", "flexible-extract")
REQUIRED = ("name", "model", "server", "hardware", "date", "source", "task", "metrics")
DEFAULT_JUDGE = {"alpha": 0.01, "max_drop": 0.02, "max_changed_fraction": None}
GOLDEN_DIR = pathlib.Path(__file__).resolve().parents[2] / "golden" / "gsm8k"


class GoldenError(ValueError):
    pass


def _fail(path, msg: str):
    raise GoldenError(f"golden file {path}: {msg}. Fix the file (see golden/README.md for the "
                      "format) or regenerate it with `harness golden update`.")


def validate(data: Any, path: Any = "<memory>") -> dict:
    if not isinstance(data, dict):
        _fail(path, "top level must be a JSON object")
    missing = [k for k in REQUIRED if k not in data]
    if missing:
        _fail(path, f"missing field(s) {', '.join(missing)}")
    task = data["task"]
    if not isinstance(task, dict) or not isinstance(task.get("num_fewshot"), int):
        _fail(path, "task.num_fewshot must be an integer")
    metrics = data["metrics"]
    if not isinstance(metrics, dict) or not metrics:
        _fail(path, "metrics must name at least one of " + ", ".join(METRICS))
    for name, m in metrics.items():
        if name not in METRICS:
            _fail(path, f"unknown metric {name!r}; use {', '.join(METRICS)}")
        acc, n = m.get("acc") if isinstance(m, dict) else None, m.get("n") if isinstance(m, dict) else None
        if not isinstance(acc, (int, float)) or not 0 <= acc <= 1:
            _fail(path, f"metrics.{name}.acc must be a number in [0, 1], got {acc!r}")
        if not isinstance(n, int) or n <= 0:
            _fail(path, f"metrics.{name}.n must be a positive integer, got {n!r}")
    per_q = data.get("per_question")
    if per_q is not None:
        if not isinstance(per_q, list) or not per_q:
            _fail(path, "per_question must be a non-empty list or null")
        for i, q in enumerate(per_q):
            if not isinstance(q, dict) or "doc_id" not in q or any(m not in q for m in metrics):
                _fail(path, f"per_question[{i}] needs doc_id and {', '.join(metrics)}")
        for name, m in metrics.items():
            if m["n"] != len(per_q):
                _fail(path, f"metrics.{name}.n={m['n']} but per_question has {len(per_q)} entries")
    _validate_logprobs(data.get("logprobs"), path)
    if data.get("fingerprint") is not None and not isinstance(data["fingerprint"], dict):
        _fail(path, "fingerprint must be an object (see harness/e2e/fingerprint.py) or absent")
    judge = {**DEFAULT_JUDGE, **(data.get("judge") or {})}
    if not 0 < judge["alpha"] < 0.5:
        _fail(path, f"judge.alpha must be in (0, 0.5), got {judge['alpha']}")
    if judge.get("drift") is not None:
        try:
            DriftLimits.from_settings(judge["drift"], "golden")
        except (TypeError, ValueError) as exc:
            _fail(path, f"judge.drift: {exc}")
    return {**data, "judge": judge}


def _validate_logprobs(records: Any, path: Any) -> None:
    """``logprobs``: question id -> compact continuation record (harness.e2e.drift), or absent
    (an accuracy-only golden: drift cannot be judged against it)."""
    if records is None:
        return
    if not isinstance(records, dict) or not records:
        _fail(path, "logprobs must be an object of question id -> record, or absent")
    for qid, rec in records.items():
        try:
            Continuation.from_compact(rec)
        except DriftError as exc:
            _fail(path, f"logprobs[{qid!r}]: {exc}")




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
               judge: dict | None = None) -> dict:
    """A golden file built from one level of an E2E run (its results and provenance)."""
    per_q = level["per_question"]
    return validate({
        "schema": 1, "name": name, "model": meta["model"], "server": meta["server"],
        "kernel_settings": meta.get("kernel_settings"), "hardware": meta.get("hardware", ""),
        "fingerprint": meta.get("fingerprint"),
        "date": datetime.date.today().isoformat(),
        "source": source or f"harness e2e run {meta.get('run_dir', '')}, level {level['level']}",
        "task": meta["task"],
        "metrics": {m: {"acc": level["metrics"][m]["acc"], "stderr": level["metrics"][m]["stderr"],
                        "n": level["n"]} for m in METRICS},
        "judge": {**DEFAULT_JUDGE, **(judge or {})},
        "per_question": per_q, "notes": notes,
        "logprobs": level.get("logprobs"),
        "recorded_from": {"concurrency": level["level"], "lm_eval_version": meta.get("lm_eval_version")},
    })


def write(golden: dict, path: pathlib.Path | None = None) -> pathlib.Path:
    path = path or GOLDEN_DIR / f"{golden['name']}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(dumps(golden))
    return path


def dumps(golden: dict) -> str:
    """JSON, indented, with one line per question's logprob record (a golden stays readable in
    a diff and a few KB per question)."""
    records = golden.get("logprobs")
    text = json.dumps({k: v for k, v in golden.items() if k != "logprobs"}, indent=1)
    if not records:
        return text + "\n"
    lines = ",\n".join(f"  {json.dumps(str(q))}: {json.dumps(r, separators=(',', ':'))}"
                       for q, r in records.items())
    return text[:-2] + ',\n "logprobs": {\n' + lines + "\n }\n}\n"
