"""The engine itself fails closed: NaN, missing -inf masks, wrong shapes or dtypes, unknown ops,
duplicate names and broken plugin modules are failures or clear errors, never a green result."""

import pathlib
import subprocess
import sys
import time

import pytest
import torch

from harness import families
from harness.core import registry
from harness.core.metrics import compare, per_token_error, ulp_distance
from harness.core.cases import Case
from harness.core.ops import UnknownOpError
from harness.core.specs import get_spec
from harness.evaluate import evaluate
from harness.impl_modules import ImplModuleError, load_impl_module
from harness.subprocess_env import child_env
from harness.core.tolerances import Tolerance

pytestmark = pytest.mark.machinery


TOL = Tolerance(1e-3, 1e-3, "test")


def test_exact_output_passes():
    ref = torch.randn(8, 5, dtype=torch.float64)
    row = compare(ref.float(), ref, TOL, torch.float32)
    assert row["passed"] and row["max_abs"] < 1e-6 and row["cosine"] > 0.999999


def test_any_nan_fails_even_where_reference_is_nan():
    ref = torch.randn(4, 4, dtype=torch.float64)
    out = ref.float().clone()
    out[1, 1] = float("nan")
    row = compare(out, ref, TOL)
    assert not row["passed"] and row["nan_count"] == 1
    ref[1, 1] = float("nan")
    assert not compare(out, ref, TOL)["passed"]


def test_missing_minus_inf_mask_entry_fails():
    ref = torch.zeros(3, 3, dtype=torch.float64)
    ref[0, 2] = float("-inf")
    out = torch.zeros(3, 3)
    row = compare(out, ref, TOL)
    assert not row["passed"] and row["nonfinite_mismatch"] == 1
    out[0, 2] = float("-inf")
    assert compare(out, ref, TOL)["passed"]


@pytest.mark.parametrize("out,why", [(torch.zeros(3, 4), "shape"),
                                     (torch.zeros(4, 3, dtype=torch.float16), "dtype")])
def test_contract_shape_and_dtype_fail(out, why):
    row = compare(out, torch.zeros(4, 3, dtype=torch.float64), TOL, torch.float32)
    assert not row["passed"] and why in row["detail"]


def test_bf16_ulp_distance():
    ref = torch.tensor([1.0, -1.0, 1.0], dtype=torch.float64)
    out = torch.tensor([1.0, -1.0, 1.0 + 2 ** -7], dtype=torch.bfloat16)
    assert ulp_distance(out, ref).tolist() == [0, 0, 1]


def test_per_token_error_is_relative_per_token():
    ref = torch.tensor([[1.0, 2.0], [100.0, 200.0]], dtype=torch.float64)
    out = ref + torch.tensor([[0.2, 0.0], [0.0, 20.0]], dtype=torch.float64)
    assert torch.allclose(per_token_error(out, ref), torch.tensor([0.1, 0.1], dtype=torch.float64))


def test_registry_rejects_unknown_op_and_duplicates():
    with pytest.raises(UnknownOpError, match="mhc_pree"):
        registry.register("mhc_pree", "x")
    with pytest.raises(registry.RegistryError, match="registered twice"):
        registry.register("mhc_post", "torch")(lambda *a: None)
    with pytest.raises(registry.RegistryError, match="without a reason"):
        registry.register("mhc_post", "nope", available=False)


def test_unavailable_implementation_keeps_its_reason():
    registry.register_unavailable("mhc_post", "vendor-x", "vendor_x is not installed")
    try:
        assert "vendor-x" not in registry.implementations("mhc_post")
        assert registry.unavailable()[("mhc_post", "vendor-x")] == "vendor_x is not installed"
    finally:
        registry.unregister("mhc_post", "vendor-x")


def test_broken_impl_module_is_an_error(tmp_path):
    bad = tmp_path / "broken_impl.py"
    bad.write_text("raise RuntimeError('boom')\n")
    with pytest.raises(ImplModuleError, match="broken_impl.py failed to import.*boom"):
        load_impl_module(str(bad))
    with pytest.raises(ImplModuleError, match="no such file"):
        load_impl_module(str(tmp_path / "missing.py"))


def _post_impl(fn, deviations=()):
    return registry.Implementation(op="mhc_post", name="vendor", fn=fn,
                                   known_deviations=tuple(deviations))


def _broken_post(x, residual, post_layer_mix, comb_res_mix):
    return registry.get("mhc_post", registry.REFERENCE).fn(x, residual, post_layer_mix,
                                                           comb_res_mix) * 1.5


SCALED = registry.KnownDeviation("scales its output by 1.5", lambda c: c.tokens == 7,
                                 bounds={"max_rel": 0.52}, outputs=("out",))


def test_known_deviation_is_reported_apart_never_as_pass():
    families.load()
    case = Case("mhc_post", tokens=7, hidden=64)
    ev = evaluate(get_spec("mhc_post"), _post_impl(_broken_post, [SCALED]), case)
    assert not ev.passed and {r["verdict"] for r in ev.rows} == {"known-deviation"}
    assert all(r["known_deviation"] == SCALED.reason for r in ev.rows)
    with pytest.raises(registry.KnownDeviationSeen):
        ev.assert_passed()
    other = evaluate(get_spec("mhc_post"), _post_impl(_broken_post, [SCALED]),
                     case.with_tokens(8))
    assert {r["verdict"] for r in other.rows} == {"fail"}, "a deviation covers only its cases"


def _post_then(change):
    def post(x, residual, post_layer_mix, comb_res_mix):
        return change(_broken_post(x, residual, post_layer_mix, comb_res_mix))
    return post


def _nan_in_first(out):
    out.view(-1)[0] = float("nan")
    return out


def _raise_index_error(out):
    raise IndexError("index 7 is out of bounds for dimension 0 with size 7")


@pytest.mark.parametrize("change,expect", [
    (lambda out: out * 1.5, "beyond what the known deviation"),  # 2.25x: beyond max_rel 0.52
    (_nan_in_first, "NaN"),
    (lambda out: out[:-1], "shape"),
])
def test_known_deviation_covers_only_what_it_documents(change, expect):
    """A failure beyond the deviation's bounds, NaN, or a contract violation is a failure."""
    families.load()
    ev = evaluate(get_spec("mhc_post"), _post_impl(_post_then(change), [SCALED]),
                  Case("mhc_post", tokens=7, hidden=64))
    assert "fail" in {r["verdict"] for r in ev.rows} and expect in ev.failures(), ev.failures()
    with pytest.raises(AssertionError):
        ev.assert_passed()


def test_known_deviation_never_covers_an_exception():
    """The strict xfail expects KnownDeviationSeen alone: an implementation's own exception
    propagates as itself and fails the xfail."""
    families.load()
    with pytest.raises(IndexError):
        evaluate(get_spec("mhc_post"), _post_impl(_post_then(_raise_index_error), [SCALED]),
                 Case("mhc_post", tokens=7, hidden=64))


def test_known_deviation_needs_bounds():
    with pytest.raises(registry.RegistryError, match="no bounds"):
        registry.KnownDeviation("differs somehow", lambda c: True)


def test_covered_cases_still_run_the_repeat_check():
    """A covered case is run as often as any other and a nondeterministic repeat fails it."""
    families.load()
    calls = []

    def flaky(x, residual, post_layer_mix, comb_res_mix):
        calls.append(1)
        out = _broken_post(x, residual, post_layer_mix, comb_res_mix)
        return out + (len(calls) - 1) * 2 ** -4
    ev = evaluate(get_spec("mhc_post"), _post_impl(flaky, [SCALED]),
                  Case("mhc_post", tokens=7, hidden=64), runs=2)
    determinism = [r for r in ev.rows if r["check"] == "determinism"]
    assert determinism and determinism[0]["verdict"] == "fail"


def test_kept_outputs_are_copies_so_a_reused_buffer_is_not_compared_with_itself():
    """An implementation returning one persistent buffer that a later call rewrites is
    compared with the first call's values, not with the buffer itself."""
    from kernels.mhc.faults import persistent_buffer_race
    from harness.detectors import determinism

    finding = determinism.check(get_spec("mhc_post"), persistent_buffer_race(64),
                                Case("mhc_post", tokens=33, hidden=64), runs=2)
    assert not finding.passed and "nondeterministic" in finding.message, finding.message


def test_heavy_cases_are_marked_to_take_a_gpu_memory_slot():
    from harness.profiles import get_profile
    from harness.pytest_plugin import _memory_marks

    nightly, smoke = get_profile("nightly"), get_profile("smoke")
    post, topk = get_spec("mhc_post"), get_spec("top_k_per_row_prefill")
    paged, prefill = get_spec("fp8_paged_mqa_logits"), get_spec("fp8_mqa_logits")
    assert _memory_marks(post, Case("mhc_post", tokens=65536, hidden=7168, device="cuda"), nightly)
    assert _memory_marks(post, Case("mhc_post", hidden=4096, device="cuda"), nightly), "token-swept test"
    assert _memory_marks(topk, Case("top_k_per_row_prefill", tokens=8192, device="cuda", context=131072), nightly)
    assert not _memory_marks(post, Case("mhc_post", tokens=8192, hidden=7168, device="cuda"), nightly)
    assert not _memory_marks(post, Case("mhc_post", hidden=200), smoke)
    assert _memory_marks(prefill, Case("fp8_mqa_logits", tokens=16384, device="cuda", seqs=32,
                                       context=8192, heads=64), nightly), \
        "vLLM's torch logits took 48 GiB here on the H100 and made a neighbour run out of memory"
    decode = (("batch", 256), ("next_n", 4), ("context", 65536))
    assert not _memory_marks(paged, Case("fp8_paged_mqa_logits", device="cuda", params=decode),
                             nightly), "a decode batch is sized by batch x next_n, not by T"


def test_mhc_mixes_are_judged_by_the_declared_accumulation_class():
    """An fp16 GEMM (error ~1e-4) fails the fp32 bound an implementation is held to by default,
    and passes only where it declares TF32 accumulation (whose bound admits ~1e-4)."""
    import dataclasses

    from kernels.mhc.faults import gemm_fp16_above_t

    fp16_gemm = gemm_fp16_above_t(0)
    case = Case("mhc_pre", tokens=257, hidden=64)
    as_fp32 = evaluate(get_spec("mhc_pre"), fp16_gemm, case)
    assert not as_fp32.passed and "post_mix" in as_fp32.failures()
    as_tf32 = evaluate(get_spec("mhc_pre"), dataclasses.replace(fp16_gemm, accumulation="tf32"), case)
    assert as_tf32.passed, as_tf32.failures()


def test_decode_cases_are_sized_by_batch_and_drafts():

    decode = Case("top_k_per_row_decode", device="cuda", batch=2048, next_n=4, context=131072)
    assert get_spec("top_k_per_row_decode").case_elements(decode) == 2048 * 4 * 131072
    q = Case("fp8_quantize_q", tokens=65536, device="cuda", heads=64)
    assert get_spec("fp8_quantize_q").case_elements(q) == 65536 * 64 * 128


def test_a_heavy_test_has_the_gpu_to_itself(tmp_path, monkeypatch):
    """Light tests share the GPU; a heavy one waits for them and keeps new ones out (flock
    locks belong to an open file, so threads here behave as xdist's worker processes do)."""
    import threading

    from harness.pytest_plugin import gpu_memory

    monkeypatch.setattr(gpu_memory.tempfile, "gettempdir", lambda: str(tmp_path))
    log, light_running = [], threading.Event()

    def light(name, hold):
        with gpu_memory.gpu_share(heavy=False):
            log.append(f"{name}+")
            light_running.set()
            time.sleep(hold)
            log.append(f"{name}-")

    def heavy():
        with gpu_memory.gpu_share(heavy=True):
            log.append("H+")
            time.sleep(0.2)
            log.append("H-")

    first = threading.Thread(target=light, args=("a", 0.4))
    first.start()
    light_running.wait()
    h = threading.Thread(target=heavy)
    h.start()
    time.sleep(0.1)
    late = threading.Thread(target=light, args=("b", 0.0))
    late.start()
    for t in (first, h, late):
        t.join(5)
    assert log.index("H+") > log.index("a-"), log
    assert log.index("b+") > log.index("H-"), f"a light test overtook the waiting heavy one: {log}"


def test_heavy_tests_run_last_on_a_gpu():
    from types import SimpleNamespace

    import pytest as _pytest

    from harness.pytest_plugin import heavy_last

    def item(name, heavy=False, e2e=False):
        marks = {"device_memory_heavy": _pytest.mark.device_memory_heavy.mark} if heavy else {}
        return SimpleNamespace(name=name, keywords={"e2e": 1} if e2e else {},
                               get_closest_marker=marks.get)

    items = [item("h0", heavy=True), item("l0"), item("h1", heavy=True), item("l1"),
             item("e", e2e=True)]
    assert [i.name for i in heavy_last(items)] == ["e", "l0", "l1", "h0", "h1"]


def test_a_subprocess_of_a_test_runs_under_its_share(tmp_path, monkeypatch):
    """A test that starts a harness run in a subprocess (the CLI suites do) holds its share
    meanwhile; a heavy test queued behind it must not make the subprocess wait for it (that
    deadlocked a GPU run: every worker stuck)."""
    import subprocess
    import sys
    import threading

    from harness.pytest_plugin import gpu_memory
    from harness.subprocess_env import child_env

    monkeypatch.setattr(gpu_memory.tempfile, "gettempdir", lambda: str(tmp_path))
    heavy_done = threading.Event()

    def heavy():
        with gpu_memory.gpu_share(heavy=True):
            heavy_done.set()

    with gpu_memory.gpu_share(heavy=False):
        waiting = threading.Thread(target=heavy, daemon=True)
        waiting.start()
        time.sleep(0.2)
        child = subprocess.run(
            [sys.executable, "-c", "from harness.pytest_plugin.gpu_memory import gpu_share\n"
             "with gpu_share(heavy=False) as waited: print(waited)"],
            env=child_env(TMPDIR=str(tmp_path)), capture_output=True, text=True, timeout=60)
        assert child.returncode == 0 and float(child.stdout) == 0.0, child.stderr
        assert not heavy_done.is_set(), "the heavy test ran beside a light one"
    waiting.join(5)
    assert heavy_done.is_set()


def test_a_case_parameter_its_spec_does_not_declare_is_refused():
    """A typo in a case parameter (``topk`` for ``top_k``) would otherwise run the default."""
    spec = get_spec("top_k_per_row_decode")
    with pytest.raises(ValueError, match="takes no case parameter topk; it takes top_k"):
        spec.make_inputs(Case("top_k_per_row_decode", tokens=4, topk=16))
    with pytest.raises(ValueError, match="a case of mhc_post given to the spec of mhc_pre"):
        get_spec("mhc_pre").make_inputs(Case("mhc_post", tokens=4, hidden=64))


def test_a_reference_with_undeclared_keys_is_refused():
    spec = get_spec("mhc_post")
    case = Case("mhc_post", tokens=3, hidden=64)
    ref = {**spec.reference(spec.make_inputs(case)), "_context": torch.zeros(1)}
    with pytest.raises(ValueError, match="undeclared \\['_context'\\]"):
        evaluate(spec, registry.get("mhc_post", "torch"), case, ref=ref)


def test_the_progress_line_estimates_by_earlier_durations():
    """Tests weighed by what they took last time: one slow test left outweighs many quick
    ones done; with no earlier run the estimate goes by count."""
    from harness.pytest_plugin.progress import Progress

    lines = []

    class Reporter:
        write_line = lines.append

    ids = [f"t{i}" for i in range(10)]
    progress = Progress(Reporter(), {**{i: 1.0 for i in ids[:9]}, "t9": 90.0})
    progress._ids, progress._done = ids, set(ids[:9])
    assert progress.line(9.0) == "progress: 9/10 tests (90%), 9s elapsed, about 1m30s left"
    by_count = Progress(Reporter(), {})
    by_count._ids, by_count._done = ids, set(ids[:5])
    assert by_count.line(100.0).endswith("about 1m40s left")
    in_flight = Progress(Reporter(), {**{i: 1.0 for i in ids[:9]}, "t9": 90.0})
    in_flight._ids, in_flight._done = ids, set(ids[:9])
    # t9 has run 60 of its 90 s: credited, the rate is 69 s of work in 69 s, 30 s are left
    assert in_flight.line(80.0, 69.0, {"t9": 60.0}).endswith("about 30s left")
    barely = Progress(Reporter(), {**{i: 1.0 for i in ids[:9]}, "t9": 900.0})
    barely._ids, barely._done = ids, {"t0"}
    assert barely.line(40.0) == "progress: 1/10 tests (10%), 40s elapsed", \
        "no estimate from 0.1% of the work"


def _script(name):
    import importlib.util

    path = pathlib.Path(__file__).parents[1] / "scripts" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_an_install_short_of_disk_stops_before_it_starts(monkeypatch, capsys):
    import types

    check_disk = _script("check_disk")
    monkeypatch.setattr(check_disk, "find_spec", lambda name: None)
    need = check_disk.needed()
    assert sum(need.values()) == pytest.approx(sum(check_disk.GB_BY_PACKAGE.values()) + 1.0)

    def free(gb):
        return lambda where: types.SimpleNamespace(free=int(gb * 1e9))

    monkeypatch.setattr(check_disk, "disk_usage", free(0.3))
    assert check_disk.main() == 1
    err = capsys.readouterr().err
    assert "0.3 GB free" in err and "run scripts/install.sh again" in err
    monkeypatch.setattr(check_disk, "disk_usage", free(50))
    assert check_disk.main() == 0
    monkeypatch.setattr(check_disk, "find_spec", lambda name: object())
    assert check_disk.needed() == {}


def test_uv_installs_from_pips_sources_or_not_at_all():
    """The install uses uv only when it can hand uv every package source pip is configured with
    (uv reads no pip.conf): each index, find-links folder and constraint file is passed on, an
    environment variable wins over a file, and a setting uv is not told stops uv being used."""
    uv_args = _script("uv_args")
    listing = ("global.extra-index-url='file:///a/simple file:///b/simple'\n"
               "global.find-links='/opt/wheels'\n:env:.find-links='/env/wheels'\n"
               "global.constraint='/etc/c.txt'\nglobal.cert='/ca.crt'\n:env:.default-timeout='9'\n")
    import unittest.mock

    with unittest.mock.patch.object(uv_args.subprocess, "run",
                                    return_value=unittest.mock.Mock(stdout=listing)):
        settings = uv_args.pip_config("python")
    assert settings["find-links"] == "/env/wheels" and settings["cert"] == "/ca.crt"
    args = uv_args.uv_args(settings)
    assert args == ["--index-strategy", "unsafe-best-match",
                    "--extra-index-url", "file:///a/simple", "--extra-index-url", "file:///b/simple",
                    "--find-links", "/env/wheels", "--constraint", "/etc/c.txt"]
    with pytest.raises(ValueError, match="trusted-host"):
        uv_args.uv_args({**settings, "trusted-host": "example.org"})


def test_an_unknown_profile_is_a_usage_error_naming_the_profiles(tmp_path):
    """The profile is resolved once, when pytest configures the run: a misspelt one stops the
    run there with the profiles to choose from, not with an internal error mid-collection."""
    proc = subprocess.run([sys.executable, "-m", "pytest", "suites/test_mhc_contract.py", "-q",
                           "-p", "no:xdist", "-p", "no:cacheprovider", "--profile", "nightlly"],
                          capture_output=True, text=True, timeout=300, env=child_env(
                              HARNESS_ADAPTERS="none"),
                          cwd=pathlib.Path(__file__).resolve().parents[1])
    assert proc.returncode == 4, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "--profile: unknown profile 'nightlly'; choose one of smoke, ci, nightly, full" in \
        proc.stderr, proc.stderr[-2000:]
    assert "INTERNALERROR" not in proc.stdout + proc.stderr
