"""The OpenAI-compatible server an E2E run talks to: attached by URL, or launched and owned.

A launched server is bound to 127.0.0.1 on a free port, its output goes to a log file in the
run's report folder, readiness is polled on ``/v1/models`` with a timeout, and it is always
stopped (process group SIGTERM, then SIGKILL) when the ``with`` block ends, also on Ctrl-C or
an exception. Commands are argument lists; no shell is involved.
"""

from __future__ import annotations

import contextlib
import json
import os
import pathlib
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from typing import Iterator, Sequence


class ServerError(RuntimeError):
    """The server could not be started, reached, or kept alive; carries its log tail."""


def exit_cause(code: int) -> str:
    """A launched server's exit code in words, with what to do about the common ones."""
    if code is not None and code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        advice = {"SIGILL": " (an illegal instruction: this server build uses CPU "
                            "instructions this machine lacks or has not enabled; rebuild it for "
                            "this machine, e.g. bash scripts/install.sh)",
                  "SIGKILL": " (killed: often out of memory; see dmesg)",
                  "SIGSEGV": " (a crash inside the server)"}.get(name, "")
        return f"server killed by {name}{advice}."
    return f"server exited with code {code}."


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def log_tail(path: pathlib.Path | None, lines: int = 30) -> str:
    if path is None or not path.exists():
        return "(no server log)"
    text = path.read_text(errors="replace").splitlines()
    return "\n".join(text[-lines:]) or "(server log is empty)"


def models(base_url: str, timeout: float = 5.0) -> list[str]:
    """Model ids the server lists; raises ServerError naming what went wrong."""
    url = base_url.rstrip("/") + "/v1/models"
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            body = resp.read()
    except (urllib.error.URLError, OSError) as exc:
        raise ServerError(f"no OpenAI-compatible server answers at {url}: {exc}") from exc
    try:
        return [m["id"] for m in json.loads(body)["data"]]
    except (ValueError, KeyError, TypeError) as exc:
        raise ServerError(f"{url} answered, but not with an OpenAI model list "
                          f"({body[:200]!r}); is --base-url pointing at the right server?") from exc


def llama_cpp_command(model_path: str, n_ctx: int = 4096, extra: Sequence[str] = ()) -> list[str]:
    """llama.cpp's OpenAI-compatible server (``pip install 'llama-cpp-python[server]'``)."""
    return [sys.executable, "-m", "llama_cpp.server", "--model", model_path, "--host", "{host}",
            "--port", "{port}", "--n_ctx", str(n_ctx), *extra]


def vllm_command(model: str, extra: Sequence[str] = ()) -> list[str]:
    """``vllm serve MODEL`` (tensor parallelism, graph mode etc. go in ``extra``)."""
    return ["vllm", "serve", model, "--host", "{host}", "--port", "{port}", *extra]


class Server:
    """A server the run talks to: ``base_url``, ``model``, and (when launched) ``log``."""

    def __init__(self, base_url: str, model: str, log: pathlib.Path | None = None,
                 process: subprocess.Popen | None = None):
        self.base_url, self.model, self.log, self.process = base_url, model, log, process

    def alive(self) -> bool:
        return self.process is None or self.process.poll() is None

    def check(self) -> None:
        """Raise ServerError if the server died or stopped answering."""
        if not self.alive():
            raise ServerError(f"server exited with code {self.process.returncode}; log tail:\n"
                              f"{log_tail(self.log)}")
        models(self.base_url)


@contextlib.contextmanager
def attach(base_url: str, model: str | None = None) -> Iterator[Server]:
    listed = models(base_url)
    if not listed:
        raise ServerError(f"{base_url} lists no models; start the server with one loaded")
    if model and model not in listed:
        raise ServerError(f"{base_url} serves {listed}, not {model!r}; pass --model with one of them")
    yield Server(base_url, model or listed[0])


@contextlib.contextmanager
def launch(command: Sequence[str], log: pathlib.Path, env: dict[str, str] | None = None,
           ready_timeout: float = 600.0, host: str = "127.0.0.1",
           cwd: pathlib.Path | None = None) -> Iterator[Server]:
    """Start ``command`` (``{host}``/``{port}`` filled in) in ``cwd``, wait until it serves,
    stop it after."""
    port = free_port()
    argv = [str(a).format(host=host, port=port) for a in command]
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "w") as out:
        out.write(f"$ {' '.join(argv)}\n")
        out.flush()
        try:
            proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT,
                                    env={**os.environ, **(env or {})}, start_new_session=True,
                                    cwd=cwd,
                                    stdin=subprocess.DEVNULL, preexec_fn=_die_with_parent)
        except OSError as exc:
            raise ServerError(f"cannot start the server {argv[0]!r}: {exc}; install it or fix the "
                              "server command") from exc
    base_url = f"http://{host}:{port}"
    try:
        deadline = time.monotonic() + ready_timeout
        listed: list[str] = []
        while True:
            if proc.poll() is not None:
                raise ServerError(f"server exited with code {proc.returncode} before it was "
                                  f"ready; log tail ({log}):\n{log_tail(log)}")
            try:
                listed = models(base_url, timeout=2.0)
                if listed:
                    break
            except ServerError:
                pass
            if time.monotonic() > deadline:
                raise ServerError(f"server not ready after {ready_timeout:.0f} s; log tail "
                                  f"({log}):\n{log_tail(log)}")
            time.sleep(0.5)
        yield Server(base_url, listed[0], log, proc)
    finally:
        stop(proc)


def _die_with_parent() -> None:
    """In the server's process before it starts (Linux): SIGTERM when the harness process dies,
    however it dies. The server runs in its own session (so stopping it stops its children), which
    also keeps it from the terminal's Ctrl-C: without this a killed run left it serving."""
    if sys.platform.startswith("linux"):
        import ctypes

        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def stop(proc: subprocess.Popen, grace: float = 15.0) -> None:
    if proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
