"""One concurrency level of GSM8K through real lm-eval (``local-completions``), in a subprocess.

lm-eval runs as its own process (``harness.e2e.lmeval_main``: lm-eval's evaluation without the
CLI's index of every bundled task) so a hang is bounded by a timeout and a crash is an error
verdict with its output, never a harness crash. Results are read from the files lm-eval writes
with its samples logged: the aggregate scores and one record per question and filter.
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
from typing import Any

from harness.e2e.data import TASK_NAME

METRIC_KEY = "exact_match,{}"
MAX_RETRIES = 2
"""Attempts per request (lm-eval's ``max_retries``: tenacity's stop_after_attempt), with
lm-eval's backoff: exponential, 0.5 s x 2^n clamped to [1, 10] s. The logprob pass
(harness.e2e.logprobs) uses the same, so one transient HTTP error costs neither pass a question."""


class LmEvalError(RuntimeError):
    pass


def command(base_url: str, model: str, level: int, task_dir: pathlib.Path, out: pathlib.Path,
            limit: int | None, gen_kwargs: dict[str, Any], request_timeout: float) -> list[str]:
    model_args = ",".join([
        f"model={model}", f"base_url={base_url.rstrip('/')}/v1/completions",
        f"num_concurrent={level}", "tokenized_requests=False", "tokenizer_backend=None",
        f"max_retries={MAX_RETRIES}", f"timeout={int(request_timeout)}"])
    argv = [sys.executable, "-m", "harness.e2e.lmeval_main", "--model", "local-completions",
            "--model_args", model_args, "--tasks", TASK_NAME, "--include_path", str(task_dir),
            "--output_path", str(out)]
    if limit:
        argv += ["--limit", str(limit)]
    if gen_kwargs:
        argv += ["--gen_kwargs", ",".join(f"{k}={v}" for k, v in gen_kwargs.items())]
    return argv


def run_level(argv: list[str], out: pathlib.Path, timeout: float) -> dict:
    """Run lm-eval; return {metrics, n, per_question, seconds}. Raises LmEvalError with the cause."""
    out.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1",
           "TOKENIZERS_PARALLELISM": "false"}
    log = out / "lm_eval.log"
    with open(log, "w") as fh:
        fh.write("$ " + " ".join(argv) + "\n")
        fh.flush()
        try:
            proc = subprocess.run(argv, stdout=fh, stderr=subprocess.STDOUT, env=env,
                                  timeout=timeout, stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired as exc:
            raise LmEvalError(f"lm-eval did not finish within {timeout:.0f} s (raise "
                              f"--level-timeout, or lower --limit); log: {log}") from exc
    tail = "\n".join(log.read_text(errors="replace").splitlines()[-25:])
    if proc.returncode != 0:
        raise LmEvalError(f"lm-eval exited with code {proc.returncode}; log {log}, tail:\n{tail}")
    return parse(out, tail)


def sample_records(out: pathlib.Path, tail: str = "") -> list[dict]:
    """The per-question records lm-eval wrote with ``--log_samples`` (its prompts included)."""
    samples = sorted(out.rglob(f"samples_{TASK_NAME}_*.jsonl"))
    if not samples:
        raise LmEvalError(f"lm-eval wrote no samples under {out}; tail:\n{tail}")
    try:
        return [json.loads(line) for line in samples[-1].read_text().splitlines() if line]
    except ValueError as exc:
        raise LmEvalError(f"lm-eval samples under {out} are malformed ({exc})") from exc


def parse(out: pathlib.Path, tail: str = "") -> dict:
    results = sorted(out.rglob("results_*.json"))
    if not results:
        raise LmEvalError(f"lm-eval wrote no results under {out}; tail:\n{tail}")
    records = sample_records(out, tail)
    try:
        scores = json.loads(results[-1].read_text())["results"][TASK_NAME]
    except (ValueError, KeyError) as exc:
        raise LmEvalError(f"lm-eval results under {out} are malformed ({exc})") from exc
    per_doc: dict[int, dict] = {}
    for rec in records:
        doc = per_doc.setdefault(rec["doc_id"], {
            "doc_id": rec["doc_id"], "doc_hash": rec.get("doc_hash"),
            "response": _response(rec)})
        doc[rec["filter"]] = int(rec["exact_match"])
    per_question = [per_doc[k] for k in sorted(per_doc)]
    from harness.e2e.golden import METRICS

    missing = [m for m in METRICS if METRIC_KEY.format(m) not in scores]
    if missing or any(m not in q for q in per_question for m in METRICS):
        raise LmEvalError(f"lm-eval results under {out} lack the {missing or METRICS} filter(s); "
                          "is the task lm-eval's gsm8k?")
    metrics = {m: {"acc": float(scores[METRIC_KEY.format(m)]),
                   "stderr": _stderr(scores.get(f"exact_match_stderr,{m}"))} for m in METRICS}
    return {"metrics": metrics, "n": len(per_question), "per_question": per_question}


def _response(rec: dict) -> str:
    resps = rec.get("resps") or [[""]]
    first = resps[0]
    return first[0] if isinstance(first, list) else str(first)


def _stderr(value) -> float | None:
    try:
        return float(value)
    except (TypeError, ValueError):
        return None
