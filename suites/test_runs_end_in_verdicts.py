"""Every way a run can end short still ends in a verdict ``git bisect run`` reads (issue 63): a
kernel that hangs fails its case, named, under a per-case time limit; a kernel that kills the
process is a failure (1) naming the case, not rc 134/139; SIGTERM writes what was judged so far
and 125; a merge needs every shard; a comparison counts rows that vanished and cannot pass with
nothing matched; out of memory is decided by the exception's class; and the summary, the HTML
page, run.json and the exit code carry one verdict.

Costs (2-core CPU): each ``harness run`` here judges one to three small mhc_post cases, 10-25 s
(most of it the start-up); the rest are folder-level checks of a second or a subprocess start."""

import json
import os
import pathlib
import re
import signal
import subprocess
import sys
import textwrap
import time

import pandas as pd
import pytest

from harness.subprocess_env import child_env

pytestmark = [pytest.mark.host_only, pytest.mark.machinery,
              pytest.mark.usefixtures("without_vendor_adapters")]

ROOT = pathlib.Path(__file__).resolve().parent.parent
ENV = {**child_env(), "HARNESS_ADAPTERS": "none"}
IMPL = """
import os, time
from harness.core.registry import register
from kernels.mhc.torch import mhc_post_compute

@register("mhc_post", "ext")
def mhc_post(x, residual, post_layer_mix, comb_res_mix):
    if x.reshape(-1, x.shape[-1]).shape[0] == 33:
        {at_33}
    return mhc_post_compute(x, residual, post_layer_mix, comb_res_mix)
"""
HANG = "time.sleep(3600)"
ABORT = "os.abort()"
SEGFAULT = "import ctypes; ctypes.string_at(0)"
TEXT_SAYS_OOM = "raise RuntimeError('HIP out of memory. Tried to allocate 2.00 GiB')"
SELECT = "test_matches_reference and mhc_post and H64 and not data and (T7 or T33)"
MHC_ACCURACY = str(pathlib.Path(__file__).with_name("test_mhc_accuracy.py"))
"""The file SELECT picks from: the harness runs here collect only it."""


def _module(tmp_path, at_33: str) -> pathlib.Path:
    path = tmp_path / "ext_kernels.py"
    path.write_text(textwrap.dedent(IMPL).replace("{at_33}", at_33))
    return path


def _run_cmd(tmp_path, at_33: str, *extra: str, workers: str = "0") -> list[str]:
    return [sys.executable, "-m", "harness", "run", "--profile", "smoke", "--impl", "ext",
            "--impl-module", str(_module(tmp_path, at_33)), "--output", str(tmp_path / "report"),
            "--workers", workers, "--", MHC_ACCURACY, "-k", SELECT, *extra]


def _harness_run(tmp_path, at_33: str, *extra: str, workers: str = "0"):
    return subprocess.run(_run_cmd(tmp_path, at_33, *extra, workers=workers),
                           capture_output=True, text=True, timeout=600, cwd=tmp_path, env=ENV)


def _report(tmp_path) -> tuple[dict, str, str]:
    folder = tmp_path / "report"
    return (json.loads((folder / "run.json").read_text()), (folder / "summary.md").read_text(),
            (folder / "report.html").read_text())


def test_a_hung_kernel_fails_its_case_by_name_and_the_run_goes_on(tmp_path):
    proc = _harness_run(tmp_path, HANG, "--timeout", "8")
    out = proc.stdout[-3000:] + proc.stderr[-3000:]
    assert proc.returncode == 1, out
    meta, summary, _ = _report(tmp_path)
    assert len(meta["timed_out"]) == 1 and "T33" in meta["timed_out"][0], meta
    assert meta["cases_run"]["ext"] == 2 and meta["case_time_limit_s"] == 8.0
    assert summary.startswith("# Verdict: FAIL") and "time limit of 8 s" in summary, summary
    assert "Per-case time limit: 8 s" in summary and "T33" in summary.split("\n\n")[1]


@pytest.mark.parametrize("at_33,workers", [(SEGFAULT, "0"), (ABORT, "2")],
                         ids=["segfault", "abort-under-xdist"])
def test_a_kernel_that_kills_the_process_is_a_failure_naming_the_case(tmp_path, at_33, workers):
    proc = _harness_run(tmp_path, at_33, workers=workers)
    out = proc.stdout[-3000:] + proc.stderr[-3000:]
    assert proc.returncode == 1, out
    meta, summary, html = _report(tmp_path)
    assert summary.startswith("# Verdict: FAIL") and "FAIL" in html
    assert meta["verdict"]["code"] == 1
    if workers == "0":
        assert "T33" in " ".join(meta["crashed"]["tests"]), meta
        assert "died (killed by SIG" in summary and "T33" in summary.split("\n\n")[1], summary
        crash = (tmp_path / "report" / "crash.md").read_text()
        assert "T33" in crash and "ext_kernels.py" in crash, crash  # the faulthandler stack
    else:
        assert any("T33" in t for t in meta["failed"]), meta


def test_sigterm_writes_what_was_judged_and_names_the_test_in_flight(tmp_path):
    proc = subprocess.Popen(_run_cmd(tmp_path, HANG), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, cwd=tmp_path, env=ENV)
    record = tmp_path / "report" / "in_flight" / "main.json"
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and proc.poll() is None:
        if record.exists() and "T33" in record.read_text():
            break
        time.sleep(0.5)
    time.sleep(1)
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=300)
    assert proc.returncode == 125, out[-3000:]
    meta, summary, _ = _report(tmp_path)
    assert meta["interrupted"]["how"] == "SIGTERM", meta
    assert any("T33" in t for t in meta["interrupted"]["tests"]) and meta["cases_run"]["ext"] >= 1
    assert summary.startswith("# Verdict: COULD NOT TEST") and "stopped (SIGTERM)" in summary
    assert (tmp_path / "report" / "results.csv").exists(), "what was judged was not written"


def test_out_of_memory_is_decided_by_class_not_by_text(tmp_path):
    """A kernel's RuntimeError that says "HIP out of memory" is its failure (1), not the
    machine's (125); the harness's own torch.OutOfMemoryError and a registered vendor class
    are out of memory, whatever their text."""
    proc = _harness_run(tmp_path, TEXT_SAYS_OOM)
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    meta, summary, _ = _report(tmp_path)
    assert not meta["out_of_memory"] and "Per-case time limit: 600 s" in summary, summary
    inner = tmp_path / "test_inner.py"
    inner.write_text(textwrap.dedent("""
        import torch
        from harness import register_out_of_memory_error

        @register_out_of_memory_error
        class VendorOutOfMemory(Exception):
            pass

        def test_torch_oom():
            raise torch.OutOfMemoryError("allocation failed")

        def test_vendor_oom():
            raise VendorOutOfMemory("pool exhausted")

        def test_text_only():
            raise RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB")
    """))
    run = subprocess.run([sys.executable, "-m", "pytest", str(inner), "-p", "harness.pytest_plugin",
                          "-p", "no:xdist", "-p", "no:cacheprovider", "--profile", "smoke",
                          "--report-dir", str(tmp_path / "inner"), "-q"],
                         capture_output=True, text=True, timeout=300, cwd=tmp_path, env=ENV)
    meta = json.loads((tmp_path / "inner" / "run.json").read_text())
    assert sorted(t.split("::")[1] for t in meta["out_of_memory"]) == [
        "test_torch_oom", "test_vendor_oom"], run.stdout[-2000:]
    assert [t.split("::")[1] for t in meta["failed"]] == ["test_text_only"]


def _folder(path: pathlib.Path, shard: str | None = None, verdicts=("pass",), extra=None,
            cases=("a", "b")) -> pathlib.Path:
    from harness.reports.summary import write_meta

    path.mkdir(parents=True)
    rows = [{"op": "mhc_post", "impl": "ext", "case": c, "check": "accuracy", "output": "out",
             "verdict": v, "max_abs": 1e-3} for c in cases for v in verdicts]
    pd.DataFrame(rows).to_csv(path / "results.csv", index=False)
    write_meta(path, profile="smoke", pytest_exit=int("fail" in verdicts), shard=shard,
               cases_run={"ext": len(rows)}, failed=["t::x"] if "fail" in verdicts else [],
               started=path.name, **(extra or {}))
    return path


def _harness(*args):
    """``harness ARGS`` in this process: (exit code, stdout, stderr)."""
    import contextlib
    import io

    from harness.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main([str(a) for a in args])
    return subprocess.CompletedProcess(args, code, out.getvalue(), err.getvalue())


@pytest.mark.parametrize("shards,missing", [(("1/3", "2/3"), "3/3"), (("1/3", "2/2"), "different splits"),
                                            (("1/2", None), "not a shard")],
                         ids=["one-missing", "mixed-splits", "not-a-shard"])
def test_a_merge_needs_every_shard_of_one_split(tmp_path, shards, missing):
    folders = [_folder(tmp_path / f"s{i}", shard) for i, shard in enumerate(shards)]
    proc = _harness("report", *folders, "--output", tmp_path / "merged")
    assert proc.returncode == 125 and missing in proc.stderr, proc.stderr[-2000:]


def test_compare_counts_rows_that_vanished_and_needs_a_match(tmp_path):
    old = _folder(tmp_path / "1-old", cases=("a", "b", "c"))
    fewer = _folder(tmp_path / "2-fewer", cases=("a",))
    other = _folder(tmp_path / "3-other", cases=("x",))
    proc = _harness("compare", old, fewer)
    assert proc.returncode == 1 and "2 row(s) of the old run vanished" in proc.stdout, proc.stdout
    proc = _harness("compare", old, other)
    assert proc.returncode == 125 and "no result row" in proc.stderr, proc.stdout + proc.stderr
    assert _harness("compare", old, old).returncode == 0


def test_the_headline_and_the_exit_code_are_one_verdict(tmp_path):
    """A run 90 metrics worse than its baseline fails in its summary, HTML page, run.json and
    exit code alike; `harness report` exits with the folder's verdict."""
    worse = _folder(tmp_path / "worse", extra={"trend": {"against": "x", "worse": 90}})
    failed = _folder(tmp_path / "failed", verdicts=("fail",))
    good = _folder(tmp_path / "good")
    for folder, code in ((worse, 1), (failed, 1), (good, 0)):
        proc = _harness("report", folder)
        assert proc.returncode == code, proc.stdout[-2000:] + proc.stderr[-2000:]
        meta = json.loads((folder / "run.json").read_text())
        head = "PASS" if code == 0 else "FAIL"
        assert meta["verdict"]["code"] == code
        assert (folder / "summary.md").read_text().startswith(f"# Verdict: {head}")
        assert f"Verdict: {head}" in (folder / "report.html").read_text()
    assert "90 metric(s) got worse" in (worse / "summary.md").read_text()


@pytest.mark.parametrize("args", [("run", "--no-such-option"), ("report",),
                                  ("compare", "only-one"), ("replay",)],
                         ids=["run", "report", "compare", "replay"])
def test_usage_errors_are_could_not_test_not_argparse_2(args):
    assert _harness(*args).returncode == 125


FAULTING = """
import torch

def test_{name}(record):
    record([{{"op": "mhc_post", "impl": "torch", "case": "{name}", "check": "accuracy",
              "output": "out", "verdict": "pass"}}])
    if {fault}:
        out_of_range = torch.tensor([1 << 40], device="cuda")
        torch.zeros(4, device="cuda")[out_of_range].sum().item()  # a device-side assert
"""


@pytest.mark.gpu
def test_a_kernel_that_faults_on_the_gpu_ends_its_worker_and_keeps_what_it_judged(tmp_path):
    """A device-side assert leaves the worker's CUDA context unusable: the worker reports the
    test by name and ends (its replacement runs the rest), and the rows it recorded before it
    ended, the faulting test's own included, reach the report."""
    import torch

    if not torch.cuda.is_available():
        pytest.skip("needs a GPU: the CUDA context a device-side assert leaves unusable")
    tests = tmp_path / "test_faulting.py"
    tests.write_text("".join(textwrap.dedent(FAULTING).format(name=f"t{i}", fault=i == 2)
                             for i in range(6)))
    report = tmp_path / "report"
    proc = subprocess.run([sys.executable, "-m", "pytest", str(tests), "-p", "harness.pytest_plugin",
                           "-n", "2", "--max-worker-restart", "2", "-p", "no:cacheprovider",
                           "--report-dir", str(report), "-q"],
                          capture_output=True, text=True, timeout=600, cwd=tmp_path, env=ENV)
    out = proc.stdout + proc.stderr
    assert "left the GPU's CUDA context unusable" in out and "INTERNALERROR" not in out, out[-3000:]
    blamed = {line.split("::")[-1].split()[0] for line in proc.stdout.splitlines()
              if line.startswith(("FAILED", "ERROR"))}
    assert blamed == {"test_t2"}, out[-3000:]
    assert re.search(r"\b5 passed", out), out[-3000:]
    rows = pd.concat(pd.read_csv(p) for p in report.glob("results-*.csv"))
    assert sorted(rows["case"]) == [f"t{i}" for i in range(6)], out[-3000:]
