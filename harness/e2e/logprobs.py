"""The logprob pass: lm-eval's own prompts sent again to the server's completions endpoint with
``logprobs=N``, greedy, at the level's concurrency, to record each continuation's tokens, their
logprobs and the top-N alternatives (harness.e2e.drift compares them).

A second pass, because lm-eval's ``local-completions`` asks for no logprobs; it replays exactly
the prompt, stop sequences and token budget lm-eval used (from its ``--log_samples`` records),
so the continuation is the one lm-eval scored.
"""

from __future__ import annotations

import concurrent.futures
import json
import urllib.error
import urllib.request
from typing import Any, Mapping

import tenacity

from harness.e2e.drift import Continuation, DriftError
from harness.e2e.lmeval import MAX_RETRIES

TOP_N = 5
DEFAULT_MAX_TOKENS = 256


class LogprobError(RuntimeError):
    """The server did not return logprobs for a prompt (down, malformed, or unsupported)."""


def request_body(model: str, prompt: str, gen: Mapping[str, Any], top_n: int) -> dict:
    """What lm-eval's local-completions sends for a generate request, plus ``logprobs``."""
    until = gen.get("until") or []
    return {"model": model, "prompt": prompt, "temperature": 0.0, "logprobs": top_n,
            "max_tokens": int(gen.get("max_gen_toks") or DEFAULT_MAX_TOKENS),
            "stop": list(until if isinstance(until, list) else [until])[:4], "seed": 1234}


class _Transient(LogprobError):
    """A request that failed in transport (connection, HTTP status, a body that is not JSON):
    retried as lm-eval retries its own."""


def _post(url: str, body: dict, timeout: float) -> dict:
    req = urllib.request.Request(url, json.dumps(body).encode(),
                                 {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return json.loads(resp.read())
    except (urllib.error.URLError, OSError, ValueError) as exc:
        raise _Transient(f"{url}: no logprobs ({type(exc).__name__}: {exc}) after "
                         f"{MAX_RETRIES} attempts; check that the server is up and serves "
                         "/v1/completions with logprobs") from exc


def _complete(url: str, body: dict, timeout: float) -> Continuation:
    """One continuation with its logprobs; a server whose logprobs are not finite or cover only
    part of the text it returned is an error (a NaN compared with a NaN-turned-number would read
    as identical), as is a request still failing after lm-eval's retries."""
    retrying = tenacity.retry(stop=tenacity.stop_after_attempt(MAX_RETRIES),
                              wait=tenacity.wait_exponential(multiplier=0.5, min=1, max=10),
                              retry=tenacity.retry_if_exception_type(_Transient), reraise=True)
    payload = retrying(_post)(url, body, timeout)
    try:
        choice = payload["choices"][0]
        return Continuation.from_openai(choice.get("logprobs"), choice.get("text"))
    except (KeyError, IndexError, TypeError, AttributeError) as exc:
        raise LogprobError(f"{url}: an answer without a choice ({type(exc).__name__}: {exc}); "
                           "is this an OpenAI-compatible /v1/completions?") from exc
    except DriftError as exc:
        raise LogprobError(f"{url}: {exc}") from exc


FLUSH_PROMPT = "Hello"
"""A prompt that shares no first token with a GSM8K prompt (they start with "Question:")."""


def collect(base_url: str, model: str, prompts: Mapping[Any, tuple[str, Mapping[str, Any]]],
            concurrency: int, timeout: float = 600.0, top_n: int = TOP_N,
            fresh: bool = False) -> dict[Any, dict]:
    """question id -> compact logprob record, ``concurrency`` requests in flight at once.

    ``fresh``: one request at a time, each after a short unrelated one, so the server evaluates
    every prompt from its first token. llama.cpp's server reuses the KV cache of whatever it ran
    before for the longest shared prefix, and a prompt evaluated in other chunks gets other
    logprobs (0.09 seen, against 0 with the same history): without this the figures would
    depend on the request order, not on the build."""
    url = f"{base_url.rstrip('/')}/v1/completions"
    if fresh:
        out = {}
        for q, (p, g) in prompts.items():
            _complete(url, {"model": model, "prompt": FLUSH_PROMPT, "max_tokens": 1,
                            "temperature": 0.0, "logprobs": 1}, timeout)
            out[q] = _complete(url, request_body(model, p, g, top_n), timeout).compact()
        return out
    with concurrent.futures.ThreadPoolExecutor(max(1, concurrency)) as pool:
        futures = {q: pool.submit(_complete, url, request_body(model, p, g, top_n), timeout)
                   for q, (p, g) in prompts.items()}
        return {q: f.result().compact() for q, f in futures.items()}


def prompts_of(samples: list[dict]) -> dict[Any, tuple[str, dict]]:
    """question id -> (prompt, generation arguments) from lm-eval's ``--log_samples`` records."""
    out = {}
    for rec in samples:
        args = (rec.get("arguments") or {}).get("gen_args_0") or {}
        if "arg_0" in args:
            gen = args.get("arg_1")
            out[rec["doc_id"]] = (args["arg_0"], gen if isinstance(gen, dict) else {})
    return out
