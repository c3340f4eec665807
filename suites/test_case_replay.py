"""A failing case travels: the run saves it (inputs, reference, failing outputs, rows,
environment) and ``harness replay`` judges it again elsewhere with the same comparison:
the same broken code fails the same way, the fixed code passes, and a damaged, truncated or
foreign file is "could not replay" (125), never a verdict."""

import subprocess
import sys

import pytest
import torch

from harness import families
from harness.cases import files as casefile
from harness.core import registry
from harness.evaluate import OBSERVERS, evaluate
from harness.cases.replay import replay_one
from harness.cases.saving import replay_command
from harness.core.cases import Case
from harness.core.specs import get_spec
from harness.core.verdicts import EXIT_BAD, EXIT_GOOD, EXIT_UNTESTABLE

pytestmark = pytest.mark.machinery


CASE = Case("mhc_post", tokens=33, hidden=64)
ENV = {"device": "cpu", "torch": torch.__version__}


def _last_token_wrong(x, residual, post_layer_mix, comb_res_mix):
    out = registry.get("mhc_post", registry.REFERENCE).fn(x, residual, post_layer_mix,
                                                          comb_res_mix)
    out[-1] += 1.0
    return out


def _evaluate_saving_failures(folder, impl, runs: int = 1):
    """Evaluate ``impl`` on CASE as a run with a report folder does: failing cases saved."""
    saved = []

    def observe(**ev):
        if any(r["verdict"] == "fail" for r in ev["rows"]):
            ev.pop("spec")
            saved.append(casefile.save(folder, environment=ENV, **ev))

    OBSERVERS.add("test-observer", observe)
    try:
        return evaluate(get_spec("mhc_post"), impl, CASE, runs=runs), saved
    finally:
        OBSERVERS.remove("test-observer")


@pytest.fixture
def saved_failure(tmp_path):
    families.load()
    registry.add(registry.Implementation("mhc_post", "replay-broken", _last_token_wrong),
                 replace=True)
    ev, saved = _evaluate_saving_failures(tmp_path, registry.get("mhc_post", "replay-broken"))
    assert not ev.passed and len(saved) == 1
    yield saved[0]
    registry.unregister("mhc_post", "replay-broken")


def test_failure_is_saved_with_what_a_replay_needs(saved_failure):
    data = casefile.load(saved_failure)
    assert data["impl"] == "replay-broken" and data["case"]["tokens"] == 33
    assert set(data["inputs"]) == set(get_spec("mhc_post").make_inputs(CASE))
    assert data["outputs"] and any(r["verdict"] == "fail" for r in data["rows"])
    assert "atol" in data["rows"][0] and data["environment"]["torch"] == torch.__version__


def test_replay_of_the_same_code_fails_the_same_way(saved_failure):
    result = replay_one(saved_failure, None, "cpu")
    assert result.code == EXIT_BAD and "same failure" in result.headline, result.headline


def test_replay_of_fixed_code_passes(saved_failure, device):
    result = replay_one(saved_failure, "triton", device)
    assert result.code == EXIT_GOOD and "fixed" in result.headline, result.headline


def test_replay_of_other_broken_code_is_a_different_failure(saved_failure):
    def scaled(x, residual, post_layer_mix, comb_res_mix):
        return registry.get("mhc_post", "torch").fn(x, residual, post_layer_mix,
                                                    comb_res_mix) * 1.01

    registry.add(registry.Implementation("mhc_post", "replay-other", scaled), replace=True)
    try:
        result = replay_one(saved_failure, "replay-other", "cpu")
    finally:
        registry.unregister("mhc_post", "replay-other")
    assert result.code == EXIT_BAD and "different failure" in result.headline


@pytest.mark.parametrize("damage", ["truncated", "foreign", "missing"])
def test_damaged_or_foreign_file_could_not_be_replayed(saved_failure, tmp_path, damage):
    path = tmp_path / "bad.pt"
    if damage == "truncated":
        path.write_bytes(saved_failure.read_bytes()[:300])
    elif damage == "foreign":
        torch.save({"weights": torch.ones(3)}, path)
    result = replay_one(path, None, "cpu")
    assert result.code == EXIT_UNTESTABLE and "could not replay" in result.headline


def test_cli_replay_exit_codes(saved_failure, tmp_path):
    truncated = tmp_path / "truncated.pt"
    truncated.write_bytes(saved_failure.read_bytes()[:300])
    run = subprocess.run([sys.executable, "-m", "harness", "replay", str(truncated)],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == EXIT_UNTESTABLE, run.stdout + run.stderr
    assert "could not test" in run.stdout and "not a readable harness case" in run.stdout
    assert replay_command(saved_failure, ["my.py"]).startswith("harness replay ")


def test_replay_of_a_nondeterminism_failure_repeats_as_often_as_the_run(tmp_path):
    """A case saved from a run of 2 calls is replayed with 2 calls: once, a race that loses
    only on a later call would read as "fixed"."""
    from kernels.mhc.faults import persistent_buffer_race

    families.load()
    fault = persistent_buffer_race(64)
    registry.add(fault, replace=True)
    try:
        _, saved = _evaluate_saving_failures(tmp_path, fault, runs=2)
        assert len(saved) == 1 and casefile.load(saved[0])["runs"] == 2
        registry.add(persistent_buffer_race(64), replace=True)  # a fresh process's buffers
        result = replay_one(saved[0], None, "cpu")
    finally:
        registry.unregister("mhc_post", fault.name)
    assert result.code == EXIT_BAD and "2 runs" in result.headline, result.headline
    assert "nondeterministic" in result.headline
