"""Logprob drift between two continuations (harness.e2e.drift): equal continuations pass, a small
move of every logprob shows as delta, a flip between near-ties is noise, a confident flip or a
token outside the other's top-N is a regression, and malformed records fail with the fix."""

from __future__ import annotations

import pytest

from harness.e2e.drift import Continuation, DriftError, DriftLimits, compare, judge

LIMITS = DriftLimits(near_tie=0.05, max_delta=0.02, max_confident_share=0.0, source="test")


def _cont(tokens, lps, tops):
    return Continuation(tuple(tokens), tuple(lps), tuple(tops))


BASE = _cont([" 4", "2", "\n"], [-0.1, -0.2, -0.3],
             [{" 4": -0.1, " 5": -2.0}, {"2": -0.2, "3": -1.8}, {"\n": -0.3, ".": -1.5}])


def test_identical_continuations_do_not_drift():
    d = compare(BASE, BASE, 0.05)
    assert d.divergence is None and d.flip == "none" and d.max_delta == 0 and d.overlap == 1


def test_moved_logprobs_show_before_any_flip():
    moved = _cont(BASE.tokens, [-0.13, -0.2, -0.3], BASE.top)
    d = compare(BASE, moved, 0.05)
    assert d.flip == "none" and d.max_delta == pytest.approx(0.03)
    level = judge([(0, BASE, moved)], LIMITS, "level 4")
    assert level.verdict == "regression" and "moved by 0.03" in level.reasons[0]


@pytest.mark.parametrize("margin,flip", [(0.01, "near-tie"), (1.0, "confident")])
def test_a_flip_is_noise_between_near_ties_and_a_regression_otherwise(margin, flip):
    ref = _cont([" 4", "2"], [-0.5, -0.2], [{" 4": -0.5, " 5": -0.5 - margin}, {"2": -0.2}])
    new = _cont([" 5", "2"], [-0.5, -0.2], [{" 5": -0.5, " 4": -0.5 - margin}, {"2": -0.2}])
    d = compare(ref, new, LIMITS.near_tie)
    assert d.divergence == 0 and d.flip == flip and d.margin == pytest.approx(margin)
    assert judge([(7, ref, new)], LIMITS, "golden").verdict == (
        "pass" if flip == "near-tie" else "regression")


def test_a_token_outside_the_other_top_n_is_a_regression():
    new = _cont([" 9", "2", "\n"], [-0.1, -0.2, -0.3], [{" 9": -0.1}] + list(BASE.top[1:]))
    assert compare(BASE, new, 0.05).flip == "outside-top-n"


def test_records_round_trip_and_bad_ones_name_the_fix():
    assert Continuation.from_compact(BASE.compact()) == BASE
    openai = {"tokens": [" 4"], "token_logprobs": [-0.1], "top_logprobs": [{" 4": -0.1}]}
    assert Continuation.from_openai(openai).tokens == (" 4",)
    with pytest.raises(DriftError, match="logprobs=N"):
        Continuation.from_openai(None)
    with pytest.raises(DriftError, match="harness golden record"):
        Continuation.from_compact({"t": [" 4"]})
    with pytest.raises(DriftError, match="one logprob"):
        _cont([" 4", "2"], [-0.1], [{}])
    with pytest.raises(DriftError, match="no question"):
        judge([], LIMITS, "level 1")


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def fake_server(request):
    import pathlib
    import subprocess
    import sys
    import time
    import urllib.request

    port = _free_port()
    script = pathlib.Path(__file__).with_name("fake_openai_server.py")
    proc = subprocess.Popen([sys.executable, str(script), "--port", str(port),
                             "--mode", request.param], stdout=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    for _ in range(100):
        try:
            urllib.request.urlopen(url + "/v1/models", timeout=1)
            break
        except OSError:
            time.sleep(0.1)
    yield url
    proc.kill()
    proc.wait()


@pytest.mark.parametrize("fake_server", ["overlap"], indirect=True)
def test_logprob_pass_sees_a_server_that_changes_under_concurrency(fake_server):
    """lm-eval's prompts sent again with logprobs=5: one at a time the answers are the clean
    ones; eight in flight, the overlap fault flips a confident token, a drift regression."""
    from harness.e2e.drift import by_question
    from harness.e2e.logprobs import collect, prompts_of

    samples = [{"doc_id": i, "arguments": {"gen_args_0": {
        "arg_0": f"Question {i}: 2 + 2?", "arg_1": {"until": ["\n\n"], "max_gen_toks": 32}}}}
        for i in range(8)]
    prompts = prompts_of(samples)
    alone = collect(fake_server, "fake-model", prompts, concurrency=1)
    together = collect(fake_server, "fake-model", prompts, concurrency=8)
    assert judge(by_question(alone, alone), LIMITS, "level 1").verdict == "pass"
    level = judge(by_question(alone, together), LIMITS, "level 8 vs level 1")
    assert level.verdict == "regression" and level.confident >= 1, level
    assert "confident choice" in level.reasons[0]


def test_logprob_pass_against_a_dead_server_names_the_fix():
    from harness.e2e.logprobs import LogprobError, collect

    with pytest.raises(LogprobError, match="serves /v1/completions with logprobs"):
        collect(f"http://127.0.0.1:{_free_port()}", "m", {0: ("p", {})}, 1, timeout=2)
