"""No path reads as good unless something was judged and passed: untested runs are 125, an
implementation's own out-of-memory is a failure, runs of different things are not compared or
resumed, and the numbers a failure prints mean what they say."""

import json
import pathlib
import subprocess
import sys

import pandas as pd
import pytest
import torch

from harness import families
from harness.core import registry
from harness.core.cases import Case
from harness.core.device import has_gpu
from harness.core.metrics import compare
from harness.core.specs import get_spec
from harness.core.tolerances import Tolerance
from harness.evaluate import evaluate
from harness.subprocess_env import child_env
from harness.core.verdicts import EXIT_BAD, EXIT_GOOD, EXIT_UNTESTABLE, run_verdict

pytestmark = pytest.mark.machinery


@pytest.mark.parametrize("meta,code,why", [
    ({"cases_run": {}}, EXIT_UNTESTABLE, "no case of any implementation was judged"),
    ({"cases_run": {"triton": 3}, "impl_required": {"aiter": "aiter cannot run here: no ROCm"}},
     EXIT_UNTESTABLE, "required implementation cannot run here (aiter"),
    ({"cases_run": {"triton": 3}, "impl_required": {"torch": ""}}, EXIT_UNTESTABLE,
     "torch ran no case"),
    ({"cases_run": {"triton": 3, "torch": 1}, "impl_required": {"torch": ""}}, EXIT_GOOD, "good"),
])
def test_a_run_that_judged_nothing_or_lacks_a_required_implementation_is_untestable(meta, code,
                                                                                   why):
    got, reason = run_verdict(0, meta)
    assert got == code and why in reason, reason


@pytest.mark.host_only
@pytest.mark.skipif(has_gpu(), reason="checks a GPU-only selection on a machine without a GPU")
def test_gpu_only_selection_on_a_cpu_is_untestable(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "harness", "run", "--op", "mhc_post",
                           "--output", str(tmp_path / "r"), "--",
                           str(pathlib.Path(__file__).with_name("test_cuda_graph_replay.py")),
                           "-m", "gpu", "-p", "no:xdist"],
                          capture_output=True, text=True, timeout=600, cwd=tmp_path,
                          env=child_env(HARNESS_ADAPTERS="none"))
    assert proc.returncode == EXIT_UNTESTABLE, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert "no case of any implementation was judged" in proc.stdout


@pytest.mark.host_only
def test_required_implementation_that_cannot_run_is_untestable(tmp_path):
    """`tox -e rocm` requires AITER: on a host where it fails to import, the run is 125 with the
    reason, even though every other implementation passed. A run scoped by ``--impl`` still
    imports what it requires, so the reason is AITER's own, not that it was left unloaded."""
    proc = subprocess.run([sys.executable, "-m", "harness", "run", "--profile", "smoke",
                           "--impl", "torch", "--require", "aiter", "--output", str(tmp_path / "r"),
                           "--", str(pathlib.Path(__file__).with_name("test_mhc_accuracy.py")),
                           "-k", "test_matches_reference and mhc_post and T7 and torch",
                           "-p", "no:xdist"],
                          capture_output=True, text=True, timeout=600, cwd=tmp_path,
                          env=child_env())
    if registry.records("mhc_post").get("aiter", None) is not None and \
            registry.records("mhc_post")["aiter"].available:
        pytest.skip("AITER runs on this machine")
    assert proc.returncode == EXIT_UNTESTABLE, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert "required implementation cannot run here (aiter" in proc.stdout, proc.stdout[-2000:]
    assert "not loaded: this run's --impl" not in proc.stdout, proc.stdout[-2000:]


def test_implementation_out_of_memory_is_a_failure_not_untestable():
    """An over-allocating kernel fails its case (verdict 1 under git bisect run); the failure
    text carries none of the markers by which the harness's own out-of-memory is recognised."""
    from harness.pytest_plugin import OOM_MARKERS

    families.load()

    def greedy(x, residual, post_layer_mix, comb_res_mix):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 1024.00 GiB")
    impl = registry.Implementation(op="mhc_post", name="greedy", fn=greedy)
    ev = evaluate(get_spec("mhc_post"), impl, Case("mhc_post", tokens=7, hidden=64))
    assert not ev.passed and "ran out of device memory" in ev.failures(), ev.failures()
    assert "Tried to allocate 1024.00 GiB" in ev.failures()
    assert not any(m in ev.failures() for m in OOM_MARKERS)
    meta = {"cases_run": {"greedy": 1}, "failed": ["t"], "out_of_memory": []}
    assert run_verdict(1, meta)[0] == EXIT_BAD


def test_a_sign_flip_near_zero_is_not_thirty_thousand_ulps():
    ref = torch.tensor([1e-30, 1.0, -2.0], dtype=torch.float64)
    out = torch.tensor([-1e-30, 1.0, -2.0], dtype=torch.bfloat16)
    row = compare(out, ref, Tolerance(1e-5, 2 ** -8, "test"), torch.bfloat16)
    assert row["passed"] and row["max_ulp"] == 0 and row["beyond_binade"] == 1, row
    out[1] = 1.5
    row = compare(out, ref, Tolerance(1e-5, 2 ** -8, "test"), torch.bfloat16)
    assert not row["passed"] and row["max_ulp"] == 64 and "64 ulp" in row["detail"], row


def test_e2e_refuses_to_resume_answers_of_another_build(tmp_path):
    from harness.e2e.run import E2EConfig, ResumeMismatch, _saved

    data = tmp_path / "data"
    data.mkdir()
    for split in ("train", "test"):
        (data / f"{split}.jsonl").write_text('{"question": "1+1?", "answer": "#### 2"}\n')
    cfg = E2EConfig(output=tmp_path, base_url="http://127.0.0.1:9", model="m", levels=(1,),
                    data_dir=str(data))
    identity = cfg.resume_identity()
    level = tmp_path / "levels" / "c1.json"
    level.parent.mkdir(parents=True)
    level.write_text(json.dumps({"level": 1, "resume_key": cfg.resume_key(),
                                 "resume_identity": identity}))
    assert _saved(tmp_path, 1, identity, cfg.resume_key())["level"] == 1
    other = E2EConfig(output=tmp_path, base_url="http://127.0.0.1:9", model="m", levels=(1,),
                      data_dir=str(data), kernel_settings={"VLLM_ROCM_USE_AITER": "0"})
    with pytest.raises(ResumeMismatch, match="kernel_settings.*new --output"):
        _saved(tmp_path, 1, other.resume_identity(), other.resume_key())
    rejudged = E2EConfig(output=tmp_path, base_url="http://127.0.0.1:9", model="m", levels=(1,),
                         data_dir=str(data), golden="another-golden")
    assert _saved(tmp_path, 1, rejudged.resume_identity(), rejudged.resume_key())["level"] == 1, \
        "another golden judges the same saved answers"


@pytest.mark.host_only
def test_e2e_without_its_data_is_untestable_and_says_what_to_do(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "harness", "e2e", "--base-url",
                           "http://127.0.0.1:9", "--data", str(tmp_path / "nowhere"),
                           "--output", str(tmp_path / "out")],
                          capture_output=True, text=True, timeout=300, cwd=tmp_path,
                          env=child_env())
    assert proc.returncode == EXIT_UNTESTABLE, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "GSM8K data not found" in proc.stdout and "--data DIR" in proc.stdout
    assert "Traceback" not in proc.stdout + proc.stderr


def _shard(folder, ids, shard):
    from harness.reports.summary import write_meta
    from harness.pytest_plugin.shards import collected_digest

    class Item:
        def __init__(self, nodeid):
            self.nodeid = nodeid
    folder.mkdir()
    digest, _ = collected_digest([Item(i) for i in ids])
    (folder / "collected.txt").write_text("\n".join(sorted(ids)) + "\n")
    pd.DataFrame([{"op": "mhc_post", "verdict": "pass"}]).to_csv(folder / "results.csv")
    write_meta(folder, profile="smoke", pytest_exit=0, shard=shard, collected=digest)


def test_shards_that_collected_different_tests_are_not_merged(tmp_path):
    from harness.reports.merge import MergeError, merge

    _shard(tmp_path / "a", ["t::x[torch]", "t::x[aiter]"], "1/2")
    _shard(tmp_path / "b", ["t::x[torch]"], "2/2")
    with pytest.raises(MergeError, match=r"collected different tests.*t::x\[aiter\]"):
        merge([tmp_path / "a", tmp_path / "b"], tmp_path / "merged")


def _run(folder, max_abs, **environment):
    from harness.reports.summary import write_meta

    folder.mkdir()
    pd.DataFrame([{"op": "mhc_post", "impl": "triton", "case": "c", "check": "accuracy",
                   "output": "out", "verdict": "pass", "max_abs": max_abs}]).to_csv(
        folder / "results.csv", index=False)
    write_meta(folder, profile="nightly", started=folder.name)
    meta = json.loads((folder / "run.json").read_text())
    meta["environment"].update(environment)
    (folder / "run.json").write_text(json.dumps(meta))


def test_trend_compares_only_one_environment_and_ignores_rounding_noise(tmp_path):
    from harness.reports.trend import TrendError, previous_run, write_trend

    _run(tmp_path / "1-old", 1e-9)
    _run(tmp_path / "2-new", 2e-9)
    assert write_trend(tmp_path / "1-old", tmp_path / "2-new")[1] == 0, "1e-9 -> 2e-9 is noise"
    _run(tmp_path / "3-other-gpu", 1e-3, gpu="another GPU")
    with pytest.raises(TrendError, match="gpu"):
        write_trend(tmp_path / "2-new", tmp_path / "3-other-gpu")
    assert previous_run(tmp_path / "3-other-gpu", "nightly") is None
    assert previous_run(tmp_path / "2-new", "nightly") == tmp_path / "1-old"
    _run(tmp_path / "4-worse", 1e-3)
    assert write_trend(tmp_path / "2-new", tmp_path / "4-worse")[1] == 1


@pytest.mark.parametrize("moved,passes", [(3, True), (3579, False)])
def test_approximate_division_admits_a_few_values_one_step_off_not_a_rounding_mode(moved,
                                                                                  passes):
    """``fp32_division: approximate`` admits what div.full.f32 can do (a value one e4m3 step off
    near a rounding boundary, rarely); a writer rounding toward zero moves thousands."""
    from kernels.sparse_indexer.compare import cache_row
    from kernels.sparse_indexer.inputs import BLOCK_SIZE, HEAD_DIM

    families.load()
    spec = get_spec("indexer_k_quant_and_cache")
    case = Case("indexer_k_quant_and_cache", tokens=4099, scale_fmt=None)
    expect = spec.reference(spec.make_inputs(case))["kv_cache"]
    out = expect.clone()
    values = out.view(out.shape[0], -1)[:, :BLOCK_SIZE * HEAD_DIM]
    nonzero = ((values & 0x7F) > 0).nonzero()[:moved]
    values[nonzero[:, 0], nonzero[:, 1]] -= 1  # one step toward zero
    row = cache_row(out, expect, BLOCK_SIZE * HEAD_DIM, division="approximate")
    assert row["passed"] == passes, row["detail"]
