"""Logprob drift between two continuations (harness.e2e.drift): equal continuations pass, a small
move of every logprob shows as delta, a flip between near-ties is noise, a confident flip or a
token outside the other's top-N is a regression, and malformed records fail with the fix."""

from __future__ import annotations

import pytest

from harness.e2e.drift import Continuation, DriftError, DriftLimits, compare, judge

pytestmark = pytest.mark.machinery


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


def _level(records, level=1, **extra):
    per_q = [{"doc_id": int(q), "strict-match": 0, "flexible-extract": 0, "response": "x"}
             for q in records]
    metrics = {m: {"acc": 0.0, "stderr": 0.0} for m in ("strict-match", "flexible-extract")}
    return {"level": level, "n": len(per_q), "per_question": per_q, "metrics": metrics,
            "logprobs": records, **extra}


def _golden(records=None, **judge):
    from harness.e2e.golden import validate

    level = _level(records or {"0": BASE.compact()})
    return validate({"name": "g", "model": "m", "server": {"kind": "llama-cpp"}, "hardware": "",
                     "date": "2026-11-26", "source": "test", "task": {"num_fewshot": 1},
                     "metrics": {m: {"acc": 0.0, "n": level["n"]} for m in level["metrics"]},
                     "per_question": level["per_question"], "logprobs": records,
                     "judge": judge})


def test_an_accuracy_only_golden_says_drift_was_not_judged_and_why():
    from harness.e2e.judge import judge_level

    gold = _golden(None)
    gold.pop("logprobs")
    run = _level({"0": BASE.compact()})
    j = judge_level(run, gold, run, drift_limits={"golden": LIMITS, "level": LIMITS})
    assert any("golden carries no logprobs (an accuracy-only reference" in b for b in j.basis), j.basis
    assert j.verdict == "inconclusive", "nothing vouches: 1 question, no exact outputs, no drift"


def test_drift_against_a_foreign_golden_vouches_for_a_level_and_flags_a_moved_one():
    from harness.e2e.judge import judge_level

    gold = _golden({"0": BASE.compact()})
    same = judge_level(_level({"0": BASE.compact()}), gold, None, drift_limits={"golden": LIMITS})
    assert same.verdict == "pass" and same.drift[0]["identical"] == 1, same.reasons
    moved = _cont(BASE.tokens, [-0.5, -0.2, -0.3], BASE.top)
    j = judge_level(_level({"0": moved.compact()}), gold, None, drift_limits={"golden": LIMITS})
    assert j.verdict == "regression" and "logprob drift vs golden" in j.reasons[0]


def test_a_level_without_logprobs_is_judged_without_drift_and_says_so():
    from harness.e2e.judge import judge_level

    gold = _golden({"0": BASE.compact()})
    run = _level({}, logprobs_error="the server returned no logprobs")
    run.pop("logprobs")
    j = judge_level(run, gold, None, drift_limits={"golden": LIMITS})
    assert any("this run has no logprobs (the server returned no logprobs)" in b
               for b in j.basis), j.basis


def test_a_golden_may_carry_its_own_limits_and_bad_ones_are_refused():
    from harness.e2e.drift import MEASURED, limits_for
    from harness.e2e.golden import GoldenError

    own = _golden(None, drift={"near_tie": 0.2, "max_delta": 0.3, "max_confident_share": 0.1})
    assert limits_for("llama-cpp", "another build", own).max_delta == 0.3
    assert limits_for("llama-cpp", "same build", _golden(None)) == MEASURED[("llama-cpp", "same build")]
    with pytest.raises(GoldenError, match=r"judge\.drift\.near: Extra inputs"):
        _golden(None, drift={"near": 0.2})
    with pytest.raises(GoldenError, match=r"logprobs\.0\.l: Field required"):
        _golden({"0": {"t": ["a"]}})


def test_drift_against_another_build_flags_gross_drift_but_cannot_vouch():
    """Another llama.cpp build moves logprobs as much as a q8_0 K cache (docs/e2e-drift.md):
    within its limits a level is not vouched for (inconclusive, saying why), beyond them it is
    a regression."""
    from harness.e2e.drift import MEASURED, OTHER_BUILD
    from harness.e2e.judge import judge_level

    other = MEASURED[("llama-cpp", OTHER_BUILD)]
    gold = _golden({"0": BASE.compact()})
    moved = _cont(BASE.tokens, [-0.3, -0.2, -0.3], BASE.top)
    j = judge_level(_level({"0": moved.compact()}), gold, None, drift_limits={"golden": other})
    assert j.verdict == "inconclusive" and j.drift[0]["verdict"] == "pass", j.reasons
    assert any("cannot vouch" in b for b in j.basis), j.basis
    gross = _cont(BASE.tokens, [-2.5, -0.2, -0.3], BASE.top)
    j = judge_level(_level({"0": gross.compact()}), gold, None, drift_limits={"golden": other})
    assert j.verdict == "regression" and "moved by 2.4" in j.reasons[0]


def test_same_build_means_the_same_arithmetic_not_the_same_cpu():
    from harness.e2e.fingerprint import same_build

    here = {"server_kind": "llama-cpp", "server_version": "0.3.36", "model_sha256": "ab",
            "gpu": "none", "system_info": "CPU : AVX2 = 1", "cpu": "Xeon", "cpu_count": "2"}
    assert same_build(here, {**here, "cpu": "EPYC", "cpu_count": "64"})
    assert not same_build(here, {**here, "system_info": "CPU : AVX2 = 1 | AVX512 = 1"})
    assert not same_build(here, {**here, "server_version": "unknown"})
    assert not same_build(None, here)
