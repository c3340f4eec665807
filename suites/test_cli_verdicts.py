"""``harness run`` exit codes are git-bisect verdicts: 0 good, 1 bad, 125 could not test, for an
implementation loaded from a file outside the repository with --impl-module."""

import json
import os
import pathlib
import re
import subprocess
import sys
import textwrap

import pytest

from harness.subprocess_env import child_env

# the harness runs here are subprocesses
pytestmark = [pytest.mark.host_only, pytest.mark.machinery]

GOOD = """
from harness.core.registry import register
from kernels.mhc.torch import mhc_post_compute

@register("mhc_post", "ext")
def mhc_post(x, residual, post_layer_mix, comb_res_mix):
    return mhc_post_compute(x, residual, post_layer_mix, comb_res_mix)
"""
BAD = GOOD.replace("return mhc_post_compute(x, residual, post_layer_mix, comb_res_mix)",
                   "return mhc_post_compute(x, residual, post_layer_mix.flip(-2), comb_res_mix)")
BROKEN = "import no_such_package_for_the_harness\n"
SUITES = pathlib.Path(__file__).resolve().parent
MHC_ACCURACY = str(SUITES / "test_mhc_accuracy.py")
"""The harness runs here name the suite file their -k selects from: pytest collects only it."""


@pytest.mark.parametrize("source,verdict", [(GOOD, 0), (BAD, 1), (BROKEN, 125)],
                         ids=["good", "bad", "broken-module"])
def test_impl_module_verdict(tmp_path, source, verdict):
    module = tmp_path / "ext_kernels.py"
    module.write_text(textwrap.dedent(source))
    cmd = [sys.executable, "-m", "harness", "run", "--profile", "smoke", "--impl", "ext",
           "--impl-module", str(module), "--output", str(tmp_path / "report"), "--", MHC_ACCURACY,
           "-k", "test_matches_reference and mhc_post and T7", "-p", "no:xdist"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=tmp_path,
                          env=child_env())
    assert proc.returncode == verdict, proc.stdout[-3000:] + proc.stderr[-3000:]
    if verdict != 125:
        summary = (tmp_path / "report" / "summary.md").read_text()
        assert summary.startswith(f"# Verdict: {'PASS' if verdict == 0 else 'FAIL'}"), summary
        assert "| ext | " + ("pass" if verdict == 0 else "**FAIL**") in summary, summary
        assert (tmp_path / "report" / "junit.xml").exists()
    if verdict == 1:
        assert f"--impl ext --impl-module {module}" in summary, "no reproduce command"
        saved = sorted((tmp_path / "report" / "cases").glob("*.pt"))
        assert saved and f"harness replay {saved[0]}" in summary.replace(
            "harness replay report/", f"harness replay {tmp_path}/report/"), summary
        junit = (tmp_path / "report" / "junit.xml").read_text()
        assert "harness replay" in junit
        assert re.search(r'name="failure_group" value="ext / mhc_post / out: beyond tolerance', junit), \
            "JUnit does not carry the failure's cause group"


def test_unknown_impl_name_cannot_test(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "harness", "run", "--profile", "smoke", "--impl",
                           "no-such-impl", "--output", str(tmp_path / "r")],
                          capture_output=True, text=True, timeout=300, cwd=tmp_path,
                          env=child_env())
    assert proc.returncode == 125, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "no-such-impl" in proc.stderr + proc.stdout


@pytest.mark.parametrize("source,verdict", [(GOOD, 0), (BAD, 1)], ids=["same", "drifted"])
def test_ab_mode_verdict(tmp_path, source, verdict):
    module = tmp_path / "build_b.py"
    module.write_text(textwrap.dedent(source))
    cmd = [sys.executable, "-m", "harness", "run", "--profile", "smoke", "--ab", "torch,ext",
           "--impl-module", str(module), "--output", str(tmp_path / "report"), "--",
           str(SUITES / "test_ab_compare.py"), "-k", "test_b_matches_a_and_reference and T7",
           "-p", "no:xdist"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=tmp_path,
                          env=child_env())
    assert proc.returncode == verdict, proc.stdout[-3000:] + proc.stderr[-3000:]


def test_bisect_of_an_implementation_absent_here_cannot_test(tmp_path):
    """AITER is not installed on CI machines: every aiter test is a skip, so the verdict must be
    'could not test' (125), never 'good'."""
    proc = subprocess.run([sys.executable, "-m", "harness", "bisect", "--op", "mhc_post",
                           "--impl", "aiter", "--", MHC_ACCURACY, "-p", "no:xdist"],
                          capture_output=True, text=True, timeout=600, cwd=tmp_path,
                          env=child_env())
    assert proc.returncode == 125, proc.stdout[-3000:] + proc.stderr[-2000:]
    from harness.adapters import selected

    why = ("aiter ran no case" if "aiter" in selected()
           else "no such implementation is registered")  # HARNESS_ADAPTERS leaves AITER out
    assert why in proc.stdout + proc.stderr and "bisect verdict: skip" in proc.stdout


@pytest.mark.parametrize("code,meta,worse,verdict", [
    (1, {"out_of_memory": ["t[T131072]"], "failed": []}, 0, 125),
    (1, {"out_of_memory": ["t[T131072]"], "failed": ["t[T7]"]}, 0, 1),
    (0, {"impl_wanted": ["mine"], "cases_run": {"torch": 3}}, 0, 125),
    (0, {"impl_wanted": ["mine"], "cases_run": {"mine": 3}}, 0, 0),
    (0, {}, 2, 1),
], ids=["oom-only", "oom-and-real-failure", "named-impl-ran-nothing", "named-impl-ran", "trend-worse"])
def test_run_verdict(code, meta, worse, verdict):
    from harness.core.verdicts import run_verdict

    assert run_verdict(code, meta, worse)[0] == verdict


def test_compare_of_a_folder_without_results_is_a_usage_error(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "harness", "compare", str(tmp_path / "nope"),
                           str(tmp_path)], capture_output=True, text=True, timeout=300,
                          env=child_env())
    assert proc.returncode == 125 and "holds no harness results" in proc.stderr


def test_impl_selects_only_the_tests_about_that_implementation():
    """`--impl torch` keeps the sweep cases of torch and the tests marked as about it, and drops
    the shipped Triton kernels' own tests and the vendor stand-in tests."""
    suites = pathlib.Path(__file__).resolve().parent
    proc = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:xdist",
                           "-p", "no:cacheprovider", "--impl", "torch",
                           str(suites / "test_topk_accuracy.py"), str(suites / "test_topk_contract.py"),
                           str(suites / "test_adapters_map_vendor_conventions.py")],
                          capture_output=True, text=True, timeout=300, env=child_env())
    collected = [line for line in proc.stdout.splitlines() if "::" in line]
    assert collected and all(line.endswith("-torch]") or "nan_in_window" in line
                             for line in collected), collected
    assert "deselected" in proc.stdout


def test_a_run_scoped_by_impl_leaves_other_vendor_packages_unimported():
    """``--impl`` names what a run judges: a vendor package that provides none of it is not
    imported (vLLM's import is ~8 s of every ``harness bisect`` step), and its implementations
    stay known, as not loaded, with the reason; an adapter in scope loads as always."""
    code = textwrap.dedent("""
        import json, sys
        from harness import adapters
        adapters.scope_to({"liger"})
        from harness.core.registry import records
        got = records("mhc_pre")
        print(json.dumps({"vllm_imported": "vllm" in sys.modules,
                          "liger": got["liger"].reason or "",
                          "vllm_triton": [got["vllm-triton"].available,
                                          got["vllm-triton"].reason]}))
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300, env=child_env())
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.splitlines()[-1])
    assert out["vllm_imported"] is False
    assert "not loaded" not in out["liger"], out
    available, reason = out["vllm_triton"]
    assert not available and "not loaded: this run's --impl (liger)" in reason, reason


def test_interpreted_vendors_skip_says_so_and_never_holds_back_a_judged_one(tmp_path):
    """``--interpreted-vendors skip`` (the test command's) skips a vendor's Triton sweep cases
    on a CPU with a reason naming `harness run`, counts them as not judged in run.json, keeps the
    shipped kernels and vendors' torch paths, and never skips a vendor the run names. (CPU
    tensors, so that a GPU host interprets them too.)"""
    pytest.importorskip("liger_kernel", reason="Liger-Kernel (the vendor whose Triton entries "
                        "this run leaves out) is not installed: bash scripts/install.sh adds it")
    suites = pathlib.Path(__file__).resolve().parent

    def run(*extra):
        folder = tmp_path / f"r{len(extra)}"
        cmd = [sys.executable, "-m", "pytest", str(suites / "test_mhc_accuracy.py"), "-q",
               "-p", "no:xdist", "-p", "no:cacheprovider", "--interpreted-vendors", "skip",
               "-k", "test_matches_reference and mhc_post and T7 and (liger or torch)",
               "--report-dir", str(folder), "-rs", "--device", "cpu", *extra]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=suites.parent,
                              env=child_env(HARNESS_ADAPTERS="liger"))
        return proc, json.loads((folder / "run.json").read_text())

    proc, meta = run()
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert "liger is a vendor's Triton entry, which this run leaves to `harness run`" in proc.stdout
    left = [c for c in meta["skipped_cases"] if c["impl"] == "liger"]
    assert left and all(c["not_judged"] == "interpreter" for c in left), left
    assert meta["cases_run"].get("torch") and not meta["cases_run"].get("liger"), meta["cases_run"]
    proc, meta = run("--impl", "liger")
    assert "leaves to `harness run`" not in proc.stdout and meta["cases_run"].get("liger"), \
        proc.stdout[-3000:]


def test_an_interpreter_the_harness_turned_on_is_not_handed_to_its_children(monkeypatch):
    """An in-process ``--device cpu`` call on a GPU host (a fuzz test's) turns the interpreter on
    for its pytest worker: the worker's later children (compute-sanitizer's GPU case, a
    ``harness run``) choose from their own device, while a user's TRITON_INTERPRET still passes."""
    from harness.core import device

    monkeypatch.setenv("TRITON_INTERPRET", "1")
    monkeypatch.setattr(device, "interpreter_turned_on_here", True)
    assert "TRITON_INTERPRET" not in child_env()
    monkeypatch.setattr(device, "interpreter_turned_on_here", False)
    assert child_env()["TRITON_INTERPRET"] == "1"


def test_a_cpu_tensor_run_after_the_kernels_are_imported_turns_no_interpreter_on(monkeypatch):
    """Triton makes a kernel compiled or interpreted when it is decorated: on a GPU host whose
    kernels are imported, an in-process ``--device cpu`` run (a fuzz test's) must leave
    TRITON_INTERPRET off, or every later check of it in that worker (AITER's launch options,
    the sweep's interpreter limits) would treat compiled kernels as interpreted."""
    from harness.core import device

    monkeypatch.setattr(device, "has_gpu", lambda: True)
    monkeypatch.setattr(device, "interpreter_turned_on_here", False)
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    monkeypatch.setattr(device, "kernels_imported", True)
    device.configure_triton.__wrapped__(cpu_tensors=True)
    assert "TRITON_INTERPRET" not in os.environ
    monkeypatch.setattr(device, "kernels_imported", False)
    monkeypatch.setattr(device, "triton_interpreted", lambda: False)  # no interpreter patches
    device.configure_triton.__wrapped__(cpu_tensors=True)
    assert os.environ.get("TRITON_INTERPRET") == "1"
