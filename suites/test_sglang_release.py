"""The installed SGLang release, bound for real: every entry the adapter names
(``harness.adapters.sglang.ENTRIES``) is registered, and then swept by the suites like any
implementation, or reported with the exact module, symbol or device it lacks; what takes another
contract says so. Guards against an adapter written to guessed names. About 2 s once the
adapters are loaded (they are, by the plugin)."""

import dataclasses
import importlib.util

import pytest

from harness import adapters, cli, families
from harness.adapters.base import NOT_THIS_CONTRACT
from harness.adapters.sglang import ENTRIES, MODULES, UNSUPPORTED
from harness.core import registry
from harness.core.cases import Case
from harness.core.device import has_gpu
from harness.core.specs import get_spec
from harness.evaluate import evaluate

pytestmark = [
    pytest.mark.skipif(importlib.util.find_spec("sglang") is None
                       or "sglang" not in adapters.selected(),
                       reason="SGLang is not installed (bash scripts/install.sh puts the pinned "
                              "release in), or HARNESS_ADAPTERS leaves its adapter out"),
    pytest.mark.implementation("sglang-torch", "sglang-triton", "sglang-tilelang")]

RUNS_EVERYWHERE = (("mhc_pre", "sglang-torch"), ("mhc_post", "sglang-torch"),
                   ("mhc_fused_post_pre", "sglang-torch"),
                   ("top_k_per_row_prefill", "sglang-torch"), ("mhc_pre", "sglang-triton"),
                   ("mhc_post", "sglang-triton"), ("mhc_fused_post_pre", "sglang-triton"),
                   ("hc_head", "sglang-triton"))
"""What the pinned release runs on any machine: its torch paths, and its Triton kernels
(interpreted on a CPU). Its torch hc_head lives in the model file, which imports torchvision: not
installed here (a PyPI torchvision has compiled ops for another torch build)."""


@pytest.fixture(scope="module", autouse=True)
def loaded():
    families.load()


@pytest.mark.parametrize("impl", sorted(ENTRIES))
def test_every_entry_is_bound_or_explained(impl):
    for op, (key, name) in ENTRIES[impl].items():
        record = registry.get(op, impl)
        if not record.available:
            assert name in record.reason or MODULES[key] in record.reason, (op, record.reason)


@pytest.mark.parametrize("op,impl", RUNS_EVERYWHERE)
def test_release_runs_its_torch_and_triton_entries_here(op, impl):
    record = registry.get(op, impl)
    assert record.available, f"{op}/{impl}: {record.reason}"


def test_decode_top_k_is_not_this_contract():
    reason = registry.get("top_k_per_row_decode", "sglang-torch").reason
    assert reason.startswith(NOT_THIS_CONTRACT) and "next_n" in reason, reason


@pytest.mark.skipif(has_gpu(), reason="on a GPU host with tilelang, SGLang's TileLang kernels run")
def test_tilelang_entries_name_what_is_missing_here():
    for op in ENTRIES["sglang-tilelang"]:
        reason = registry.get(op, "sglang-tilelang").reason
        assert "tilelang" in reason, (op, reason)


def test_release_is_in_the_report_environment_and_the_vendors_command(capsys):
    from harness.environment import environment

    assert environment()["release of sglang"].startswith("sglang "), environment()
    assert cli.main(["vendors"]) == 0
    out = capsys.readouterr().out
    assert "### sglang (sglang " in out and "| sglang-torch | top_k_per_row_prefill | runs here" in out


UNSUPPORTED_CASES = {
    ("sglang-triton", "mhc_pre"): Case("mhc_pre", tokens=1, hidden=200),
    ("sglang-triton", "mhc_fused_post_pre"): Case("mhc_fused_post_pre", tokens=1, hidden=200),
    ("sglang-tilelang", "fp8_paged_mqa_logits"): Case("fp8_paged_mqa_logits", tokens=6, batch=3,
                                                      next_n=2, context=300, heads=4),
}


@pytest.mark.parametrize("impl,op", [(i, o) for i, ops in UNSUPPORTED.items() for o in ops])
def test_unsupported_inputs_still_fail(impl, op, device):
    """An input class declared another contract is not judged by the sweep; here it must still
    fail, or the entry hides nothing and must go (a release that lifts the limit is noticed)."""
    record = registry.get(op, impl)
    if not record.available:
        pytest.skip(f"{op}/{impl} cannot run here: {record.reason}")
    case = dataclasses.replace(UNSUPPORTED_CASES[(impl, op)], device=device)
    assert record.unsupported_for(case), f"{case.id} is not declared unsupported for {impl}"
    try:
        passed = evaluate(get_spec(op), record, case).passed
    except AssertionError:  # SGLang's own assert refusing the shape: still unsupported
        passed = False
    assert not passed, (f"{op}/{impl} now passes {case.id}: its Unsupported entry "
                        f"({record.unsupported_for(case)[0].reason[:80]}...) is stale; remove it")
