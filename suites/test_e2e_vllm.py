"""A real vLLM server in the E2E loop (`harness e2e --vllm`, issue 64).

The machinery tests (seconds, no vLLM needed) show the bad inputs: no vLLM installed, a model
folder that cannot load, a golden of another vLLM build, and how clean reruns set a golden's
drift limits. The server tests need the vLLM CPU server (`HARNESS_E2E=vllm bash
scripts/install.sh`) and minutes on 2 cores: the committed golden's build against this machine's
server, clean and with a seeded fault (the model run in float32 against its bf16 golden: a real
vLLM setting that changes the numerics; an fp8 KV cache, the first choice, needs AVX-512 or AMX
in vLLM's CPU build), each at level 1 and the highest level. They skip, saying how to install, elsewhere.
"""

from __future__ import annotations

import importlib.util
import json
import os
import pathlib
import subprocess
import sys

import pytest

from harness.e2e import noise, vllm_cpu
from harness.e2e.drift import Continuation

VLLM_GOLDEN = "smollm2-135m-bf16-vllm-cpu-1shot-first8"
LEVELS = "1,4"


def _harness(*args, env=None, timeout=120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "harness", *map(str, args)], capture_output=True,
                          text=True, timeout=timeout, env={**os.environ, **(env or {})})


@pytest.mark.machinery
def test_no_vllm_installed_is_could_not_test_with_the_install_step(tmp_path):
    env = {"HARNESS_VLLM_VENV": str(tmp_path / "none"), "HARNESS_VLLM_PYTHON": ""}
    proc = _harness("e2e", "--vllm", "--levels", "1", "--output", tmp_path / "run", env=env)
    assert proc.returncode == 125, proc.stdout + proc.stderr
    assert "no vLLM server installed" in proc.stdout and "HARNESS_E2E=vllm" in proc.stdout


@pytest.mark.machinery
def test_a_model_folder_that_cannot_load_is_named(tmp_path):
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "config.json").write_text("{}")
    env = {"HARNESS_VLLM_PYTHON": sys.executable}
    proc = _harness("e2e", "--vllm", "--vllm-model", tmp_path / "model", "--levels", "1",
                    "--output", tmp_path / "run", env=env)
    assert proc.returncode == 125 and "has no weights" in proc.stdout, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr


def _model(tmp_path) -> pathlib.Path:
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    (folder / "model.safetensors").write_bytes(b"weights")
    return folder


@pytest.mark.machinery
def test_a_golden_of_another_vllm_build_is_refused_saying_what_differs(tmp_path, monkeypatch):
    from harness.e2e import fingerprint
    from harness.e2e.golden import GoldenError
    from harness.e2e.run import E2EConfig, check_golden_matches

    monkeypatch.setattr(vllm_cpu, "version", lambda python: "vllm-cpu 0.32.0")
    cmd = vllm_cpu.command(sys.executable, str(_model(tmp_path)), vllm_cpu.SETTINGS, [])
    cfg = E2EConfig(output=tmp_path, server_kind="vllm", server_cmd=cmd, num_fewshot=1)
    here = fingerprint.collect("vllm", cmd)
    gold = {"name": "g", "task": {"num_fewshot": 1}, "fingerprint": here}
    check_golden_matches(gold, cfg)
    fp32 = vllm_cpu.command(sys.executable, str(tmp_path / "model"),
                            {**vllm_cpu.SETTINGS, "--dtype": "float32"}, [])
    for other, what in (({**here, "server_version": "vllm 0.33.0"}, "server_version"),
                        (fingerprint.collect("vllm", fp32), "server_settings")):
        with pytest.raises(GoldenError, match=f"another vllm build.*{what}.*golden record"):
            check_golden_matches({**gold, "fingerprint": other}, cfg)
    seeded = vllm_cpu.command(sys.executable, str(tmp_path / "model"), vllm_cpu.SETTINGS,
                              ["--kv-cache-dtype", "fp8"])
    check_golden_matches(gold, E2EConfig(output=tmp_path, server_kind="vllm", server_cmd=seeded,
                                         num_fewshot=1))  # a change under test, not a build


def _record(logprobs):
    tokens = tuple(f"t{i}" for i in range(len(logprobs)))
    top = tuple({t: lp, "alt": lp - 1.0} for t, lp in zip(tokens, logprobs))
    return Continuation(tokens, tuple(logprobs), top).compact()


@pytest.mark.machinery
def test_drift_limits_come_from_clean_reruns_with_a_stated_margin():
    clean = {1: {"0": _record([-0.1, -0.2]), "1": _record([-0.3])},
             4: {"0": _record([-0.1, -0.2]), "1": _record([-0.3])}}
    moved = {1: clean[1], 4: {"0": _record([-0.15, -0.2]), "1": _record([-0.3])}}
    same = noise.limits([clean, clean], "test")
    assert (same["max_delta"], same["near_tie"], same["max_confident_share"]) == (0.01, 0.01, 0)
    noisy = noise.limits([clean, moved], "test")
    assert noisy["max_delta"] == pytest.approx(2 * 0.05) and noisy["measured"]["reruns"] == 1
    assert "2x those" in noisy["source"]
    with pytest.raises(ValueError, match="at least one clean rerun"):
        noise.limits([clean], "test")


def _vllm_installed() -> None:
    try:
        vllm_cpu.version(vllm_cpu.server_python())
    except FileNotFoundError as exc:
        pytest.skip(f"the vLLM server is not installed: {exc}")
    if importlib.util.find_spec("lm_eval") is None:
        pytest.skip("lm-eval is not installed (the E2E client): run scripts/install.sh")


@pytest.fixture(scope="module")
def vllm_golden(request):
    from harness.e2e import fingerprint
    from harness.e2e.golden import load, resolve
    from harness.profiles import get_profile

    if (get_profile(request.config.getoption("profile")).name not in ("nightly", "full")
            and os.environ.get("HARNESS_E2E") != "vllm"):
        pytest.skip("the real vLLM server runs in the nightly and full profiles, or with "
                    "HARNESS_E2E=vllm (about 10 min on 2 cores)")
    _vllm_installed()
    try:
        path = resolve(VLLM_GOLDEN)
    except Exception as exc:  # noqa: BLE001 (a missing golden says which)
        pytest.skip(str(exc))
    gold = load(str(path))
    python = vllm_cpu.server_python()
    cmd = vllm_cpu.command(python, str(vllm_cpu.model_folder(python)), vllm_cpu.SETTINGS, [])
    here = fingerprint.collect("vllm", cmd)
    if not fingerprint.same_build(gold["fingerprint"], here):
        pytest.skip(f"{VLLM_GOLDEN} was recorded with another vLLM build: "
                    + "; ".join(fingerprint.differences(gold["fingerprint"], here)))
    return gold


@pytest.mark.e2e
@pytest.mark.timeout(3600)  # one run: 10 min on an idle 2-core CPU, 25+ min on a loaded one
@pytest.mark.parametrize("seeded,verdict", [((), "pass"),
                                            (("--vllm-arg=--dtype=float32",), "regression")])
def test_vllm_holds_its_golden_and_a_seeded_precision_change_is_a_regression(vllm_golden, tmp_path,
                                                                             seeded, verdict):
    proc = _harness("e2e", "--vllm", "--golden", VLLM_GOLDEN, "--levels", LEVELS, *seeded,
                    "--output", tmp_path, timeout=3500)
    summary = json.loads((tmp_path / "e2e.json").read_text())
    verdicts = [lv["verdict"] for lv in summary["levels"]]
    assert verdicts == [verdict] * len(verdicts), (proc.stdout[-4000:],
                                                   [lv["reasons"] for lv in summary["levels"]])
    assert proc.returncode == {"pass": 0, "regression": 1}[verdict]


@pytest.mark.machinery
def test_a_run_takes_the_goldens_generation_settings(tmp_path):
    """A vLLM golden recorded with max_gen_toks=64: a run given only --golden generates 64
    tokens too (256-token continuations would diverge from it where the golden's stop)."""
    import argparse

    from harness.e2e import cli
    from harness.e2e.golden import load

    gold = load("smollm2-135m-q4_1-llamacpp-1shot-first3")
    gold["task"]["gen_kwargs"] = {"max_gen_toks": 64}
    path = tmp_path / "g.json"
    path.write_text(json.dumps(gold))
    parser = argparse.ArgumentParser()
    cli.add_parsers(parser.add_subparsers())
    args = parser.parse_args(["e2e", "--vllm", "--golden", str(path)])
    cli._settings_like_golden(args)
    assert (args.gen_kwargs, args.limit, args.num_fewshot) == ("max_gen_toks=64", 3, 1)
