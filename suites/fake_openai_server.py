"""A minimal OpenAI-compatible completions server for the E2E robustness tests.

``python fake_openai_server.py --host H --port P --mode ok|malformed|overlap [--die-after N]``:
answers ``/v1/models``; ``/v1/completions`` returns a fixed GSM8K-style answer (``ok``), a body
that is not JSON (``malformed``), another answer whenever a second request is in flight
(``overlap``: a serving fault that shows only under concurrency, such as a batch-dependent
kernel), or exits the process after N completions (``--die-after``). Asked with ``logprobs=N``,
it returns them, one token a character; ``--logprobs-fault nan|truncated`` breaks them (NaN
everywhere, or the first 3 tokens of the text only), ``--fail-logprobs N`` answers the first N
requests with logprobs with an HTTP 500 (a transient server error).
"""

import argparse
import json
import os
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

ANSWER = " 2 + 2 = 4.\n#### 4"
ANSWER_UNDER_OVERLAP = " 2 + 2 = 5.\n#### 5"


def logprobs_of(text: str, top_n: int) -> dict:
    """A completions ``logprobs`` object for ``text``, one token a character: the chosen token
    at -0.1, alternatives far below it (a confident choice everywhere)."""
    tokens = list(text)
    top = [{t: -0.1, **{f"<alt{i}>": -3.0 - i for i in range(max(top_n - 1, 0))}} for t in tokens]
    if "5" in tokens:  # the overlap answer's "5" is confident, and "4" is one of its alternatives
        top[tokens.index("5")]["4"] = -2.5
    if "4" in tokens:
        top[tokens.index("4")]["5"] = -2.5
    return {"tokens": tokens, "token_logprobs": [-0.1] * len(tokens), "top_logprobs": top,
            "text_offset": list(range(len(tokens)))}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--mode", default="ok", choices=["ok", "malformed", "overlap"])
    ap.add_argument("--die-after", type=int, default=0)
    ap.add_argument("--logprobs-fault", choices=["nan", "truncated"])
    ap.add_argument("--fail-logprobs", type=int, default=0)
    args = ap.parse_args()
    served = {"n": 0, "in_flight": 0, "failed": 0}
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, fmt, *a):
            print(fmt % a, flush=True)

        def _send(self, body: bytes, ctype="application/json"):
            self.send_response(200)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self):
            self._send(json.dumps({"object": "list", "data": [{"id": "fake-model"}]}).encode())

        def do_POST(self):
            length = int(self.headers.get("Content-Length", 0))
            request = json.loads(self.rfile.read(length) or b"{}")
            if args.die_after and served["n"] >= args.die_after:
                print("fake server: dying as asked", flush=True)
                os._exit(3)
            served["n"] += 1
            if request.get("logprobs") and served["failed"] < args.fail_logprobs:
                served["failed"] += 1
                self.send_error(500, "fake server: a transient error, as asked")
                return
            if args.mode == "malformed":
                self._send(b"<html>upstream error</html>", "text/html")
                return
            prompts = request.get("prompt")
            prompts = prompts if isinstance(prompts, list) else [prompts]
            with lock:
                served["in_flight"] += 1
                overlapped = served["in_flight"] > 1
            if args.mode == "overlap":
                time.sleep(0.2)  # so that concurrent requests do overlap
            with lock:
                overlapped = overlapped or served["in_flight"] > 1
                served["in_flight"] -= 1
            text = ANSWER_UNDER_OVERLAP if args.mode == "overlap" and overlapped else ANSWER
            top_n = request.get("logprobs")
            lps = logprobs_of(text, int(top_n)) if top_n else None
            if lps and args.logprobs_fault == "nan":
                lps["token_logprobs"] = [float("nan")] * len(lps["tokens"])
                lps["top_logprobs"] = [{k: float("nan") for k in t} for t in lps["top_logprobs"]]
            elif lps and args.logprobs_fault == "truncated":
                lps = {k: v[:3] for k, v in lps.items()}
            self._send(json.dumps({"object": "text_completion", "choices": [
                {"index": i, "text": text, "finish_reason": "stop", "logprobs": lps}
                for i in range(len(prompts))]}).encode())

    ThreadingHTTPServer((args.host, args.port), Handler).serve_forever()


if __name__ == "__main__":
    main()
