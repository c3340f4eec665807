"""Goldens and servers that used to read as "good" (issue 63): a golden is checked against one
schema (harness.e2e.golden_schema) by `harness golden check` and every E2E run alike, and a
malformed one is "could not test" (125) naming the field; a server whose logprobs break, or a
logprob request failing after lm-eval's retries, makes the level "could not test", never
"identical"; a comparison that could not be judged never takes away another's vouching."""

from __future__ import annotations

import copy
import importlib.util
import json
import math
import pathlib
import subprocess
import sys

import pytest

from harness.e2e.drift import Continuation, DriftLimits
from harness.e2e.golden import GoldenError, validate

pytestmark = pytest.mark.machinery

FAKE = str(pathlib.Path(__file__).with_name("fake_openai_server.py"))
LIMITS = DriftLimits(near_tie=0.05, max_delta=0.02, max_confident_share=0.0, source="test")
RECORD = Continuation((" 4", "\n"), (-0.1, -0.3), ({" 4": -0.1, " 5": -2.0}, {"\n": -0.3})).compact()


def _golden(questions: int = 20) -> dict:
    per_q = [{"doc_id": i, "doc_hash": f"h{i}", "response": " 4\n", "strict-match": 1,
              "flexible-extract": True} for i in range(questions)]
    return {"name": "g", "model": "m", "server": {"kind": "vllm"}, "hardware": "", "date": "d",
            "source": "test", "task": {"num_fewshot": 1, "limit": questions},
            "metrics": {m: {"acc": 1.0, "stderr": 0.0, "n": questions}
                        for m in ("strict-match", "flexible-extract")},
            "judge": {"alpha": 0.01, "max_drop": 0.02, "max_changed_fraction": 0.0},
            "per_question": per_q, "logprobs": {str(i): copy.deepcopy(RECORD)
                                                for i in range(questions)}}


def _set(path: str, value):
    def mutate(g):
        *parents, last = path.split(".")
        node = g
        for key in parents:
            node = node[int(key)] if isinstance(node, list) else node[key]
        node[int(last) if isinstance(node, list) else last] = value
    return mutate


def _only_first_logprobs(g):
    g["logprobs"] = {"0": g["logprobs"]["0"]}


MALFORMED = {
    "logprobs for 1 of 20 questions": (_only_first_logprobs, "logprobs: records for 1 of 20"),
    "a NaN logprob": (_set("logprobs.3.l", [math.nan, -0.3]), "logprobs.3.l[0]"),
    "a NaN alternative": (_set("logprobs.3.n.0. 5", math.nan), "logprobs.3.n[0]. 5"),
    "a truncated record": (_set("logprobs.3.l", [-0.1]), "logprobs.3: 2 tokens, 1 logprobs"),
    "max_drop as a string": (_set("judge.max_drop", "0.02"), "judge.max_drop"),
    "max_changed_fraction as a string": (_set("judge.max_changed_fraction", "0"),
                                         "judge.max_changed_fraction"),
    "a negative max_changed_fraction": (_set("judge.max_changed_fraction", -1),
                                        "judge.max_changed_fraction"),
    "alpha as a string": (_set("judge.alpha", "0.01"), "judge.alpha"),
    "a per-question 'false' string": (_set("per_question.4.strict-match", "false"),
                                      "per_question[4].strict-match"),
    "an accuracy of true": (_set("metrics.strict-match.acc", True), "metrics.strict-match.acc"),
    "a misspelt judge key": (_set("judge.maxdrop", 0.02), "judge.maxdrop"),
}


def test_a_well_formed_golden_and_every_committed_one_validate():
    from harness.e2e.golden import GOLDEN_DIR, load

    assert validate(_golden())["judge"]["max_drop"] == 0.02
    for path in GOLDEN_DIR.glob("*.json"):
        load(str(path))


@pytest.mark.parametrize("case", MALFORMED)
def test_a_malformed_golden_is_refused_naming_the_field(case):
    mutate, field = MALFORMED[case]
    gold = _golden()
    mutate(gold)
    with pytest.raises(GoldenError) as err:
        validate(gold, "bad.json")
    assert field in str(err.value) and "Fix the file" in str(err.value), str(err.value)


def _harness(*args, timeout=120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "harness", *map(str, args)], capture_output=True,
                          text=True, timeout=timeout)


def test_golden_check_and_e2e_say_could_not_test_naming_the_field(tmp_path):
    """`golden check` and `harness e2e` share the schema: 125 with the field, no traceback
    (a string alpha used to be a TypeError traceback, exit 1; a string max_drop validated and
    then crashed the E2E judge, exit 1, which bisect reads as a regression)."""
    gold = _golden()
    gold["judge"].update(alpha="0.01", max_drop="0.02")
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(gold))
    check = _harness("golden", "check", path)
    assert check.returncode == 125 and "judge.alpha" in check.stdout, check.stdout + check.stderr
    e2e = _harness("e2e", "--golden", path, "--base-url", "http://127.0.0.1:9", "--levels", "1",
                   "--output", tmp_path / "run")
    assert e2e.returncode == 125 and "judge.max_drop" in e2e.stdout, e2e.stdout + e2e.stderr
    assert "Traceback" not in check.stderr + e2e.stderr


@pytest.fixture
def fake_server(request):
    from harness.e2e.server import launch

    cmd = [sys.executable, FAKE, "--host", "{host}", "--port", "{port}", *request.param]
    with launch(cmd, pathlib.Path(request.getfixturevalue("tmp_path")) / "fake.log",
                ready_timeout=30) as srv:
        yield srv.base_url


PROMPTS = {i: (f"Question {i}: 2 + 2?", {"until": ["\n\n"], "max_gen_toks": 32})
           for i in range(6)}


@pytest.mark.parametrize("fake_server", [["--fail-logprobs", "2"]], indirect=True)
def test_the_logprob_pass_retries_a_transient_error_as_lm_eval_does(fake_server):
    """Two HTTP 500s among six questions at concurrency 3: each retried once (lm-eval's
    max_retries=2 attempts), every question keeps its record."""
    from harness.e2e.logprobs import collect

    records = collect(fake_server, "fake-model", PROMPTS, concurrency=3, timeout=10)
    assert sorted(records) == list(PROMPTS)


@pytest.mark.parametrize("fake_server,problem", [
    (["--logprobs-fault", "nan"], "not a finite log-probability"),
    (["--logprobs-fault", "truncated"], "truncated logprobs"),
    (["--fail-logprobs", "100"], "after 2 attempts"),
], indirect=["fake_server"])
def test_broken_logprobs_from_a_server_are_an_error_not_identical(fake_server, problem):
    from harness.e2e.logprobs import LogprobError, collect

    with pytest.raises(LogprobError, match=problem):
        collect(fake_server, "fake-model", PROMPTS, concurrency=2, timeout=10)


def _level(level=1, records=True, **extra):
    per_q = [{"doc_id": i, "doc_hash": f"h{i}", "response": " 4\n", "strict-match": 1,
              "flexible-extract": 1} for i in range(20)]
    res = {"level": level, "n": 20, "per_question": per_q,
           "metrics": {m: {"acc": 1.0, "stderr": 0.0} for m in ("strict-match", "flexible-extract")},
           **extra}
    if records:
        res["logprobs"] = {str(i): RECORD for i in range(20)}
    return res


def _judge(run, gold, lowest):
    from harness.e2e.fingerprint import KEYS
    from harness.e2e.judge import judge_level

    fp = {k: "x" for k in KEYS}
    return judge_level(run, gold, lowest, run_fingerprint=fp, drift_limits={
        "golden": LIMITS, "level": LIMITS}, max_changed_across_levels=0.0)


def test_a_level_whose_logprob_pass_failed_could_not_be_tested_even_with_equal_outputs():
    """Exact outputs equal to the golden's used to vouch while the server's logprobs were
    broken: the level passed. Now it is inconclusive (125), saying why and what to do."""
    from harness.e2e.fingerprint import KEYS

    gold = validate({**_golden(), "fingerprint": {k: "x" for k in KEYS}})
    run = _level(records=False, logprobs_error="truncated logprobs: ...", logprobs_failed=True)
    j = _judge(run, gold, None)
    assert j.verdict == "inconclusive", (j.verdict, j.reasons)
    assert "could not test: the logprob pass failed" in j.reasons[-1] and "--logprobs 0" in j.reasons[-1]


def test_drift_vouching_against_the_golden_survives_an_unjudged_level_comparison():
    """Golden drift judged and vouching, then level 1 without logprobs (not judged): the level
    used to drop to inconclusive; the vouching stands and the basis says what was not judged."""
    gold = validate(_golden())
    j = _judge(_level(level=4), gold, _level(level=1, records=False))
    assert j.verdict == "pass", j.reasons
    assert any("level 1: drift not judged" in b for b in j.basis), j.basis
    assert j.drift and j.drift[0]["against"] == "golden"


def test_logprobs_for_part_of_the_questions_do_not_vouch():
    gold = validate(_golden())
    run = _level()
    run["logprobs"] = {"0": RECORD}
    j = _judge(run, gold, None)
    assert not j.drift and any("for 1 of this run's 20 questions" in b for b in j.basis), j.basis


def test_a_server_with_nan_logprobs_is_could_not_test_end_to_end(tmp_path):
    """lm-eval against the fake server whose logprobs are NaN: its levels used to read "pass,
    identical" to each other (NaN kept as -1e9 on both sides); now 125, saying why."""
    if importlib.util.find_spec("lm_eval") is None:
        pytest.skip("lm-eval is not installed (the E2E client): run scripts/install.sh")
    proc = _harness("e2e", "--levels", "1", "--limit", 2, "--output", tmp_path,
                    "--request-timeout", 30, "--max-changed-across-levels", 0, "--",
                    sys.executable, FAKE, "--host", "{host}", "--port", "{port}",
                    "--logprobs-fault", "nan", timeout=600)
    levels = json.loads((tmp_path / "e2e.json").read_text())["levels"]
    assert proc.returncode == 125, proc.stdout[-3000:]
    assert all(lv["verdict"] == "inconclusive" and not lv["drift"] for lv in levels), levels
    assert all("could not test: the logprob pass failed" in " ".join(lv["reasons"])
               for lv in levels), [lv["reasons"] for lv in levels]
