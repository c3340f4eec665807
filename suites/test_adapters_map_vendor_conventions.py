"""Each vendor adapter, driven through stand-in packages with the vendor's own call signatures
and conventions (``suites/vendor_standins.py``): the adapted functions must satisfy the
contract (checked by the op specs against float64), pass the right extra arguments, and a
missing package or entry point must be recorded as unavailable with the reason."""

import sys

import pytest
import torch

from harness import families
from harness.core import registry
from harness.adapters import aiter, deepgemm, liger, tilelang, vllm
from harness.adapters.base import register_adapter
from harness.evaluate import evaluate
from kernels.mhc.ops import MHC_OPS
from harness.core.cases import Case
from harness.core.specs import get_spec
from kernels.mhc import torch as mhc_ref
from suites import vendor_standins as standins

# stand-in vendors, not the real packages
pytestmark = [pytest.mark.implementation(), pytest.mark.machinery]

MHC_TOKENS = (1, 7, 33)
MHC_HIDDEN = 64
TOPK_CASES = (
    ("top_k_per_row_prefill", 9, (("top_k", 16), ("context", 96), ("seqs", 3), ("pad", 2))),
    ("top_k_per_row_decode", 8, (("top_k", 16), ("context", 80), ("next_n", 2), ("pad", 3))),
    ("top_k_per_row_decode", 5, (("top_k", 32), ("context", 20), ("clean", False))),
)


@pytest.fixture
def isolated_registry(monkeypatch):
    families.load()
    monkeypatch.setattr(registry, "_REGISTRY",
                        {op: impls.copy() for op, impls in registry._REGISTRY.items()})
    standins.CALLS.clear()


@pytest.fixture
def standin_vendors(monkeypatch, isolated_registry):
    """vLLM, AITER, TileLang and DeepGEMM stand-ins importable, and their adapters registered."""
    monkeypatch.setitem(sys.modules, "tilelang", standins.module("tilelang"))
    monkeypatch.setitem(sys.modules, "deep_gemm", standins.deep_gemm_module())
    standins.install(monkeypatch, standins.vllm_modules())
    standins.install(monkeypatch, standins.aiter_modules())
    monkeypatch.setattr(torch.ops, "_C", standins.vllm_c_ops(), raising=False)
    status = {a.name: register_adapter(a) for a in (vllm.ADAPTER, aiter.ADAPTER,
                                                    tilelang.ADAPTER, deepgemm.ADAPTER)}
    status["liger"] = register_adapter(liger.ADAPTER, api=standins.liger_api())
    return status


def _passes(op: str, impl: str, case: Case) -> None:
    ev = evaluate(get_spec(op), registry.get(op, impl), case)
    assert ev.passed, f"{impl} via its adapter on {case.id}: {ev.failures()}"


def test_every_adapter_registers_what_its_package_provides(standin_vendors):
    for name, status in standin_vendors.items():
        assert status.startswith("registered"), f"{name}: {status}"
    for op in MHC_OPS:
        for impl in ("aiter", "tilelang", "liger"):
            assert registry.get(op, impl).available, f"{op}/{impl} not registered"
    for op, impl in standins.VLLM_BOUND:
        assert registry.get(op, impl).available, f"{op}/{impl} not registered"
    absent = registry.get("hc_head", "vllm-torch")
    assert not absent.available and "hc_head_fused_torch" in absent.reason
    for op in ("top_k_per_row_prefill", "top_k_per_row_decode"):
        assert registry.get(op, "vllm").available and registry.get(op, "aiter").available
    for op in ("fp8_mqa_logits", "fp8_paged_mqa_logits"):
        for impl in ("vllm-deepgemm", "aiter", "deepgemm"):
            assert registry.get(op, impl).available


@pytest.mark.parametrize("op,impl", [(op, impl) for impl in ("aiter", "tilelang", "liger")
                                     for op in MHC_OPS] + list(standins.VLLM_BOUND))
def test_mhc_adapters_meet_the_contract(standin_vendors, op, impl):
    for tokens in MHC_TOKENS:
        _passes(op, impl, Case(op, tokens=tokens, hidden=MHC_HIDDEN, seed=3))


@pytest.mark.parametrize("op", MHC_OPS)
def test_tilelang_entries_get_the_contracts_leading_dims_flattened(standin_vendors, op):
    """vLLM's TileLang kernels take ``[T, m, H]`` only (the stand-ins refuse other ranks, as the
    real ones do): the adapter flattens the contract's ``[2, 3, m, H]`` and restores it."""
    spec = get_spec(op)
    fn = registry.get(op, "tilelang").fn
    inputs = spec.make_inputs(Case(op, tokens=6, hidden=MHC_HIDDEN, seed=2))
    flat = spec.run(fn, inputs)
    shaped = {k: v.reshape(2, 3, *v.shape[1:]) if k in spec.token_args else v
              for k, v in inputs.items()}
    out = spec.run(fn, shaped)
    for name in spec.outputs:
        assert out[name].shape == (2, 3, *flat[name].shape[1:]), name
        assert torch.equal(out[name].reshape(flat[name].shape), flat[name]), name


def test_aiter_mhc_post_writes_into_a_caller_made_output(standin_vendors):
    case = Case("mhc_post", tokens=5, hidden=MHC_HIDDEN)
    spec = get_spec("mhc_post")
    out = spec.call(registry.get("mhc_post", "aiter").fn, spec.make_inputs(case))
    name, args, _ = [c for c in standins.CALLS if c[0] == "aiter.mhc_post"][-1]
    assert args[0] is out, "the adapter must return the buffer it handed aiter.mhc_post"


def test_liger_residual_mix_convention_is_load_bearing(isolated_registry):
    """A post kernel in vLLM's (transposed) convention behind the Liger adapter must fail: the
    adapter's explicit transpose is what makes Liger's untransposed kernel correct."""
    register_adapter(liger.ADAPTER, api=standins.liger_api(untransposed=False))
    ev = evaluate(get_spec("mhc_post"), registry.get("mhc_post", "liger"),
                  Case("mhc_post", tokens=7, hidden=MHC_HIDDEN))
    assert not ev.passed


@pytest.mark.parametrize("impl", ["vllm", "aiter"])
@pytest.mark.parametrize("op,rows,params", TOPK_CASES)
def test_topk_adapters_meet_the_contract(standin_vendors, impl, op, rows, params):
    _passes(op, impl, Case(op, tokens=rows, seed=1, params=params))


def test_aiter_topk_gets_no_values_buffer_and_k_last(standin_vendors):
    _passes("top_k_per_row_prefill", "aiter", Case("top_k_per_row_prefill", tokens=4, top_k=8, context=40))
    _, args, _ = [c for c in standins.CALLS if c[0] == "aiter.ops.topk.top_k_per_row_prefill"][-1]
    assert args[4] is None and args[-1] == 8


def _logits_inputs():
    q = torch.zeros(6, 4, 8)
    kv = (torch.zeros(10, 8), torch.ones(10))
    cache = torch.zeros(3, 64, 1, 12, dtype=torch.uint8)
    return q, kv, cache


@pytest.mark.parametrize("impl", ["deepgemm", "vllm-deepgemm"])
def test_deepgemm_logits_ask_for_clean_logits_and_a_schedule(standin_vendors, impl):
    q, kv, cache = _logits_inputs()
    weights, ks, ke = torch.ones(6, 4), torch.zeros(6, dtype=torch.int32), torch.ones(6, dtype=torch.int32)
    tag, kind, args, kwargs = registry.get("fp8_mqa_logits", impl).fn(q, kv, weights, ks, ke)
    assert kind == "prefill" and args == (q, kv, weights, ks, ke) and kwargs == {"clean_logits": True}
    lens, tables = torch.tensor([70, 5], dtype=torch.int32), torch.zeros(2, 2, dtype=torch.int32)
    q4 = q.view(2, 3, 4, 8)
    _, kind, args, kwargs = registry.get("fp8_paged_mqa_logits", impl).fn(
        q4, cache, weights, lens, tables, 128)
    assert kind == "paged" and kwargs == {"clean_logits": True}
    assert args[:5] == (q4, cache, weights, lens, tables) and args[6] == 128
    assert args[5] == ("meta", 64, 1), "schedule must be computed for the cache's block size"


def test_aiter_logits_unpack_kv_and_fill_a_minus_inf_output(standin_vendors):
    q, kv, cache = _logits_inputs()
    weights, ks, ke = torch.ones(6, 4), torch.zeros(6, dtype=torch.int32), torch.ones(6, dtype=torch.int32)
    _, kind, args, _ = registry.get("fp8_mqa_logits", "aiter").fn(q, kv, weights, ks, ke)
    assert args == (q, kv[0], kv[1], weights, ks, ke)
    lens, tables = torch.tensor([70, 5], dtype=torch.int32), torch.zeros(2, 2, dtype=torch.int32)
    out = registry.get("fp8_paged_mqa_logits", "aiter").fn(q.view(2, 3, 4, 8), cache, weights,
                                                           lens, tables, 128)
    _, args, kwargs = [c for c in standins.CALLS
                       if c[0].endswith("deepgemm_fp8_paged_mqa_logits")][-1]
    assert out is args[3] and out.shape == (6, 128) and torch.isneginf(out).all()
    assert kwargs == {"Preshuffle": False, "KVBlockSize": 64}


def test_missing_package_is_unavailable_with_the_install_hint(monkeypatch, isolated_registry):
    monkeypatch.setitem(sys.modules, "vllm", None)
    status = register_adapter(vllm.ADAPTER)
    assert status.startswith("unavailable") and "install vLLM" in status
    reasons = registry.unavailable()
    assert "install vLLM" in reasons[("mhc_pre", "vllm-torch")]
    assert "install vLLM" in reasons[("top_k_per_row_decode", "vllm")]


def test_missing_entry_point_is_unavailable_not_silently_dropped(monkeypatch, isolated_registry):
    mods = standins.aiter_modules()
    del mods["aiter"].mhc_fused_post_pre
    standins.install(monkeypatch, mods)
    register_adapter(aiter.ADAPTER)
    record = registry.get("mhc_fused_post_pre", "aiter")
    assert not record.available and "no entry point for mhc_fused_post_pre" in record.reason
    assert registry.get("mhc_post", "aiter").available


def _renamed_hc_head(out, hc_eps, rms_norm_eps, hc_base, hc_scale, hc_fn, x):
    out.copy_(mhc_ref.hc_head(x, hc_fn, hc_scale, hc_base, rms_norm_eps, hc_eps))


def test_binding_by_name_follows_renamed_and_reordered_parameters():
    """A release that reorders and renames parameters and writes into ``out`` is still called
    correctly: arguments go by name, never by position."""
    from harness.adapters.signature import bind_by_name
    from harness.adapters.vllm import ALIASES, _hc_head_out

    fn = bind_by_name("hc_head", _renamed_hc_head, aliases=ALIASES["hc_head"],
                      make_out=_hc_head_out)
    assert callable(fn), fn
    _passes_fn("hc_head", fn, Case("hc_head", tokens=9, hidden=MHC_HIDDEN, seed=2))


def test_binding_by_name_names_what_it_cannot_map():
    from harness.adapters.signature import bind_by_name

    def needs_more(x, residual, post_layer_mix, comb_res_mix, workspace):
        return x

    reason = bind_by_name("mhc_post", needs_more)
    assert isinstance(reason, str) and "'workspace'" in reason and "contract of mhc_post" in reason

    def takes_less(x, residual, post_layer_mix):
        return x

    assert "takes no comb_res_mix" in bind_by_name("mhc_post", takes_less)


def _passes_fn(op, fn, case):
    impl = registry.Implementation(op=op, name="bound", fn=fn)
    ev = evaluate(get_spec(op), impl, case)
    assert ev.passed, ev.failures()
