"""``harness e2e``: GSM8K per concurrency level against a served model, judged and reported.

Each level's results are saved as soon as it finishes (``levels/c<N>.json``); a rerun with the
same settings into the same folder resumes from them. The golden is not one of those settings:
a saved level holds the server's answers, which no golden shapes, so a rerun with another
``--golden`` re-judges them without starting the server. A level that fails (server died, lm-eval
failed, malformed output) is kept as an ``error`` record with the cause and the server log
tail; when the server is gone, the remaining levels are errors too.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import pathlib
import platform
import time
from typing import Any

import pandas as pd

from harness.e2e import (data, drift, fingerprint, golden as golden_mod, lmeval, logprobs,
                        server as server_mod)
from harness.e2e.judge import comparisons, judge_level, worst

DEFAULT_LEVELS = (1, 8, 32, 128)
FRESH_PROMPTS = ("llama-cpp",)
"""Server kinds whose logprob pass evaluates every prompt afresh (harness.e2e.logprobs.collect):
llama.cpp serves one request at a time and reuses the previous request's KV cache."""


@dataclasses.dataclass
class E2EConfig:
    output: pathlib.Path
    levels: tuple[int, ...] = DEFAULT_LEVELS
    base_url: str | None = None
    server_cmd: list[str] | None = None
    server_env: dict[str, str] = dataclasses.field(default_factory=dict)
    server_kind: str = "command"
    model: str | None = None
    golden: str | None = None
    limit: int | None = None
    num_fewshot: int = 5
    gen_kwargs: dict[str, Any] = dataclasses.field(default_factory=dict)
    data_dir: str | None = None
    ready_timeout: float = 600.0
    level_timeout: float = 7200.0
    request_timeout: float = 600.0
    kernel_settings: dict[str, Any] = dataclasses.field(default_factory=dict)
    hardware: str = ""
    max_changed_across_levels: float | None = None
    """Share of greedy outputs that may differ between a level and the run's lowest one (None:
    not judged). 0 for servers whose outputs cannot depend on concurrency."""
    accept_aggregate_golden: bool = False
    """Compare a --limit subset with a golden that only has whole-set accuracy anyway."""
    logprobs_top_n: int = logprobs.TOP_N
    """Alternatives recorded per token by the logprob pass (0: no pass, drift not judged)."""

    def resume_identity(self) -> dict[str, Any]:
        """What must match for saved levels to be reused: the settings, the test split and what
        can be seen of the server build and model file before it starts (not the golden, which
        only judges the answers)."""
        build = fingerprint.collect(self.server_kind,
                                    None if self.base_url else self.server_cmd, None)
        build.pop("system_info", None)  # read from the server's log, after it starts
        return {"base_url": self.base_url, "server_cmd": self.server_cmd,
                "server_env": self.server_env, "model": self.model, "limit": self.limit,
                "num_fewshot": self.num_fewshot, "gen_kwargs": self.gen_kwargs,
                "kernel_settings": self.kernel_settings, "logprobs_top_n": self.logprobs_top_n,
                "test_sha256": data.test_split_sha256(data.locate(self.data_dir)), **build}

    def resume_key(self) -> str:
        key = json.dumps(self.resume_identity(), sort_keys=True, default=str)
        return hashlib.sha256(key.encode()).hexdigest()[:16]


class ResumeMismatch(ValueError):
    """The output folder holds levels of another server build, model or settings."""


def _level_path(out: pathlib.Path, level: int) -> pathlib.Path:
    return out / "levels" / f"c{level}.json"


def _saved(out: pathlib.Path, level: int, identity: dict, resume_key: str) -> dict | None:
    """The saved result of ``level``, to resume from; None when there is none or it is an
    error (run again). Refuses a level saved under another identity: resuming would judge this
    build on another build's answers (a ``git bisect run`` into one folder)."""
    path = _level_path(out, level)
    if not path.exists():
        return None
    saved = json.loads(path.read_text())
    if saved.get("resume_key") != resume_key:
        was = saved.get("resume_identity") or {}
        changed = sorted(k for k in set(was) | set(identity)
                         if json.dumps(was.get(k), sort_keys=True, default=str)
                         != json.dumps(identity.get(k), sort_keys=True, default=str))
        what = ", ".join(f"{k} ({str(was.get(k))[:40]!r} saved, {str(identity.get(k))[:40]!r} "
                         "now)" for k in changed[:4]) or "saved before resume identities existed"
        raise ResumeMismatch(
            f"{path} was saved by another run than this one: {what}. Its answers cannot stand "
            f"for this server; pass a new --output, or delete {out / 'levels'} to start over")
    if saved.get("error"):
        return None
    return saved


def _progress(levels, todo):
    try:
        from tqdm import tqdm
    except ImportError:
        return levels
    return tqdm(levels, desc="E2E levels", unit="level", total=len(levels),
                initial=len(levels) - len(todo))


def server_for(cfg: E2EConfig):
    """The server of ``cfg`` as a context manager: attached, or launched and stopped after."""
    return _server(cfg)


def _server(cfg: E2EConfig):
    if cfg.base_url:
        return server_mod.attach(cfg.base_url, cfg.model)
    if not cfg.server_cmd:
        raise ValueError("give --base-url of a running server or a server to launch "
                         "(--smollm, --gguf, --vllm-model or -- CMD ARG...)")
    return server_mod.launch(cfg.server_cmd, cfg.output / "server.log", env=cfg.server_env,
                             ready_timeout=cfg.ready_timeout,
                             cwd=cfg.output if cfg.server_kind == "vllm" else None)


def run_levels(cfg: E2EConfig, meta: dict, server=None) -> list[dict]:
    folder = data.locate(cfg.data_dir)
    task_dir = data.write_task(folder, cfg.output / "task", cfg.num_fewshot)
    identity = cfg.resume_identity()
    fp = cfg.resume_key()
    results = {lv: _saved(cfg.output, lv, identity, fp) for lv in cfg.levels}
    todo = [lv for lv in cfg.levels if results[lv] is None]
    if todo:
        try:
            with contextlib.nullcontext(server) if server else _server(cfg) as srv:
                meta["served_model"] = srv.model
                dead = None
                for level in _progress(todo, todo):
                    if dead:
                        results[level] = {"level": level, "error": dead}
                        continue
                    results[level] = _one_level(cfg, srv, level, task_dir, identity, fp)
                    if results[level].get("error") and not srv.alive():
                        dead = f"server died during level {level}: {results[level]['error']}"
        except (server_mod.ServerError, OSError) as exc:
            for level in todo:
                if results[level] is None:
                    results[level] = {"level": level, "error": f"server: {exc}"}
    return [results[lv] for lv in cfg.levels]


def _one_level(cfg: E2EConfig, srv, level: int, task_dir: pathlib.Path, identity: dict,
               fp: str) -> dict:
    out = cfg.output / "lm_eval" / f"c{level}"
    argv = lmeval.command(srv.base_url, srv.model, level, task_dir, out, cfg.limit,
                          cfg.gen_kwargs, cfg.request_timeout)
    try:
        srv.check()
        res = {"level": level, **lmeval.run_level(argv, out, cfg.level_timeout)}
        res.update(_logprob_pass(cfg, srv, level, out, res["per_question"]))
    except (lmeval.LmEvalError, server_mod.ServerError) as exc:
        cause = str(exc)
        if srv.log is not None:
            cause += f"\nserver log tail ({srv.log}):\n{server_mod.log_tail(srv.log)}"
        if not srv.alive():
            cause = server_mod.exit_cause(srv.process.returncode) + " " + cause
        res = {"level": level, "error": cause}
    res["resume_key"], res["resume_identity"] = fp, identity
    path = _level_path(cfg.output, level)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(res, indent=1))
    return res


def _logprob_pass(cfg: E2EConfig, srv, level: int, out: pathlib.Path,
                  questions: list[dict]) -> dict:
    """The level's continuations with their logprobs (harness.e2e.logprobs), sent at the
    level's concurrency, for every question lm-eval answered. A pass that fails (a request still
    failing after lm-eval's retries, logprobs that are not finite or cover part of the text, a
    question without its prompt) sets ``logprobs_failed``: the level cannot be judged
    (harness.e2e.judge); one whose server died meanwhile makes the level an error."""
    if cfg.logprobs_top_n <= 0:
        return {"logprobs_error": "the logprob pass was turned off (--logprobs 0)"}
    prompts = logprobs.prompts_of(lmeval.sample_records(out))
    start = time.monotonic()
    try:
        lacking = sorted({q["doc_id"] for q in questions} - set(prompts))
        if lacking:
            raise logprobs.LogprobError(f"lm-eval's samples hold no prompt for question(s) "
                                        f"{lacking[:5]}")
        records = logprobs.collect(srv.base_url, srv.model, prompts, level,
                                   cfg.request_timeout, cfg.logprobs_top_n,
                                   fresh=cfg.server_kind in FRESH_PROMPTS)
    except logprobs.LogprobError as exc:
        srv.check()
        return {"logprobs_error": str(exc), "logprobs_failed": True}
    return {"logprobs": {str(q): r for q, r in records.items()},
            "logprobs_top_n": cfg.logprobs_top_n,
            "logprob_seconds": round(time.monotonic() - start, 1)}


def metadata(cfg: E2EConfig) -> dict:
    folder = data.locate(cfg.data_dir)
    import lm_eval

    return {
        "model": cfg.model or (cfg.server_cmd and _model_from_cmd(cfg.server_cmd)) or "",
        "server": {"kind": cfg.server_kind, "command": cfg.server_cmd, "base_url": cfg.base_url,
                   "env": cfg.server_env},
        "kernel_settings": cfg.kernel_settings,
        "hardware": cfg.hardware or f"{platform.machine()} {platform.node()}",
        "task": {"name": "gsm8k", "num_fewshot": cfg.num_fewshot, "limit": cfg.limit,
                 "gen_kwargs": cfg.gen_kwargs, "test_sha256": data.test_split_sha256(folder)},
        "levels": list(cfg.levels), "golden": cfg.golden, "run_dir": str(cfg.output),
        "max_changed_across_levels": cfg.max_changed_across_levels,
        "lm_eval_version": getattr(lm_eval, "__version__", "?"),
    }


def _model_from_cmd(cmd: list[str]) -> str:
    for flag in ("--model",):
        if flag in cmd and cmd.index(flag) + 1 < len(cmd):
            return pathlib.Path(cmd[cmd.index(flag) + 1]).name
    return cmd[2] if len(cmd) > 2 and cmd[:2] == ["vllm", "serve"] else ""


REFUSE_OTHER_BUILD = ("vllm",)
"""Server kinds judged only against a golden of their own build: vLLM's drift limits come from
clean reruns of one build (recorded in the golden), and another build's noise is unmeasured."""


def check_golden_matches(gold: dict, cfg: E2EConfig) -> None:
    shots = gold["task"]["num_fewshot"]
    if shots != cfg.num_fewshot:
        raise golden_mod.GoldenError(
            f"golden {gold['name']} was measured {shots}-shot but this run is "
            f"{cfg.num_fewshot}-shot; rerun with --num-fewshot {shots}")
    if cfg.server_kind in REFUSE_OTHER_BUILD and gold.get("fingerprint") and cfg.server_cmd:
        here = fingerprint.collect(cfg.server_kind, cfg.server_cmd, None)
        if not fingerprint.same_build(gold["fingerprint"], here):
            differs = [d for d in fingerprint.differences(gold["fingerprint"], here)
                       if d.split()[0] in fingerprint.BUILD_KEYS]
            raise golden_mod.GoldenError(
                f"golden {gold['name']} was recorded with another {cfg.server_kind} build than "
                f"this one ({'; '.join(differs) or 'unknown'}): its outputs and drift limits "
                f"stand for that build only. Record one with this build: harness golden record "
                f"--like {gold['name']} --name NEW --vllm --reruns 2")


def run(cfg: E2EConfig, server=None) -> dict:
    """Run (or resume) every level, judge them, write the report; returns the summary dict.
    ``server``: one already started for this configuration (clean reruns share it)."""
    cfg.output.mkdir(parents=True, exist_ok=True)
    gold = golden_mod.load(cfg.golden) if cfg.golden else None
    if gold is not None:
        check_golden_matches(gold, cfg)
    meta = metadata(cfg)
    levels = run_levels(cfg, meta, server)
    ok = [r for r in levels if not r.get("error")]
    lowest = min(ok, key=lambda r: r["level"]) if ok else None
    log = cfg.output / "server.log"
    meta["fingerprint"] = fingerprint.collect(cfg.server_kind, None if cfg.base_url else cfg.server_cmd,
                                              log if log.exists() else None)
    family = comparisons(levels, gold)
    relation = (drift.SAME_BUILD if gold is not None and fingerprint.same_build(
        gold.get("fingerprint"), meta["fingerprint"]) else drift.OTHER_BUILD)
    drift_limits = {"golden": drift.limits_for(cfg.server_kind, relation, gold),
                    "level": drift.limits_for(cfg.server_kind, drift.SAME_BUILD,
                                              gold if relation == drift.SAME_BUILD else None)}
    judgements = [judge_level(r, golden_mod.at_level(gold, r["level"]), lowest, run_fingerprint=meta["fingerprint"],
                              max_changed_across_levels=cfg.max_changed_across_levels,
                              family=family, accept_aggregate_subset=cfg.accept_aggregate_golden,
                              drift_limits=drift_limits)
                  for r in levels]
    verdict = worst(j.verdict for j in judgements)
    summary = {"verdict": verdict, "meta": meta,
               "golden": {k: gold[k] for k in ("name", "source", "metrics", "judge")} if gold else None,
               "levels": [{**{k: v for k, v in r.items() if k not in ("per_question", "logprobs")},
                           "verdict": j.verdict, "reasons": j.reasons, "basis": j.basis,
                           "drift": j.drift,
                           "min_detectable_drop": j.min_detectable_drop}
                          for r, j in zip(levels, judgements)],
               "tests": [t for j in judgements for t in j.tests]}
    (cfg.output / "e2e.json").write_text(json.dumps(summary, indent=1, default=str))
    changes = pd.DataFrame([c for j in judgements for c in j.changes])
    changes.to_csv(cfg.output / "per_question_diff.csv", index=False)
    from harness.e2e.report import write_e2e_report

    write_e2e_report(cfg.output, summary, changes)
    return summary
