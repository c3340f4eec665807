"""AITER's Triton entries (PyPI ``amd-aiter``) bound for real: each entry of
``harness.adapters.aiter_triton.ENTRIES`` loads from the installed package and is registered,
what has no counterpart in the contract says why, the conventions the adapter maps (argument
names, the kv pair, the -inf pre-filled output, the block table as AITER's ``kv_indices``, the
ragged metadata, the per-head sum) put each value where AITER's kernel reads it, and each
``Unsupported`` input class still fails. The accuracy suites judge these entries like any
implementation; this suite guards the binding. About 20 s on a CPU (the Triton interpreter)."""

import dataclasses
import inspect
import sys

import pytest
import torch

from harness import adapters, families
from harness.adapters import aiter_triton, aiter_triton_launch
from harness.adapters.aiter_triton_loader import DISTRIBUTION, installed_tree, load
from harness.core import registry
from harness.core.cases import Case
from harness.core.errors import ContractViolation
from harness.core.specs import get_spec
from harness.evaluate import evaluate
from kernels.sparse_indexer import torch as ref


def _installed() -> bool:
    try:
        installed_tree()
        return True
    except ImportError:
        return False


pytestmark = [
    pytest.mark.skipif(not _installed() or "aiter_triton" not in adapters.selected(),
                       reason=f"{DISTRIBUTION} is not installed (bash scripts/install.sh puts the "
                              "pinned release in), or HARNESS_ADAPTERS leaves its adapter out"),
    pytest.mark.implementation(*aiter_triton.ENTRIES)]

BOUND = [(impl, op) for impl, ops in aiter_triton.ENTRIES.items() for op in ops]


@pytest.fixture(scope="module", autouse=True)
def builtins():
    families.load()


@pytest.mark.machinery
@pytest.mark.parametrize("impl,op", BOUND)
def test_every_entry_loads_from_the_installed_package(impl, op):
    record = registry.get(op, impl)
    assert record.available, f"{op}/{impl} did not load from {DISTRIBUTION}: {record.reason}"


@pytest.mark.machinery
def test_the_loader_leaves_import_aiter_as_it_was():
    """The modules come from the installed tree, and ``aiter`` is not left in sys.modules (vLLM
    probes for it; the ROCm adapter imports the real package)."""
    before = {n for n in sys.modules if n == "aiter" or n.startswith("aiter.")}
    modules, _ = load(("aiter.ops.triton.pa_mqa_logits",))
    module = modules["aiter.ops.triton.pa_mqa_logits"]
    assert not isinstance(module, str), module
    assert module.__file__.startswith(str(installed_tree()[0]))
    assert {n for n in sys.modules if n == "aiter" or n.startswith("aiter.")} == before


@pytest.mark.machinery
@pytest.mark.parametrize("op", ["top_k_per_row_prefill", "top_k_per_row_decode"])
def test_dense_topk_is_listed_as_not_this_contract(op):
    record = registry.get(op, "aiter-triton")
    assert not record.available
    assert record.reason.startswith(aiter_triton.NOT_THIS_CONTRACT), record.reason
    assert "aiter.ops.triton.topk.topk(" in record.reason, record.reason


@pytest.mark.machinery
def test_amd_only_launch_options_are_dropped_on_nvidia_only(monkeypatch):
    seen = []

    class Kernel:
        def __getitem__(self, grid):
            return lambda *args, **kwargs: seen.append(sorted(kwargs))

    def wrapper(x):
        _kernel[(1,)](x_ptr=x, num_warps=4, waves_per_eu=2, matrix_instr_nonkdim=16)

    scope = {"_kernel": Kernel()}
    monkeypatch.setattr(aiter_triton_launch, "kernels_launched", lambda fn: scope)
    launch = aiter_triton_launch.launching(type(wrapper)(wrapper.__code__, scope, "wrapper"))
    monkeypatch.setattr(aiter_triton_launch, "_compiled_for_nvidia", lambda kernel: False)
    launch(1)
    monkeypatch.setattr(aiter_triton_launch, "_compiled_for_nvidia", lambda kernel: True)
    monkeypatch.setattr(aiter_triton_launch, "_backend_options", lambda: frozenset({"num_warps"}))
    launch(1)
    assert seen == [["matrix_instr_nonkdim", "num_warps", "waves_per_eu", "x_ptr"],
                    ["num_warps", "x_ptr"]]


@pytest.mark.machinery
def test_whether_a_kernel_compiles_is_asked_of_the_kernel_not_of_triton_interpret(monkeypatch):
    """AITER's kernels are compiled or interpreted as Triton decided when they were imported; a
    CPU-tensor run turning TRITON_INTERPRET on later in the same process (on a GPU host) must
    not stop the AMD-only options being dropped from the compiled ones (Triton 3.6 raises
    KeyError on them for NVIDIA)."""
    import triton
    from triton.runtime.interpreter import InterpretedFunction
    from triton.runtime.jit import JITFunction

    def body(x_ptr):
        pass

    compiled, interpreted = JITFunction(body), InterpretedFunction(body)
    tuned = triton.autotune(configs=[triton.Config({})], key=[])(compiled)
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    assert aiter_triton_launch._compiles(compiled) and aiter_triton_launch._compiles(tuned)
    assert not aiter_triton_launch._compiles(interpreted)


@pytest.mark.machinery
def test_a_write_past_the_output_is_a_contract_violation():
    out, guard = aiter_triton_launch.guarded_full((2, 3), float("-inf"), "cpu")
    aiter_triton_launch.check_guard(guard, "nothing past the end")
    guard[5] = 0.0
    with pytest.raises(ContractViolation, match="wrote 1 value"):
        aiter_triton_launch.check_guard(guard, "one past the end")


def _within_fp32_bound(out, expect, bound, head_dim, heads):
    """The spec's fp32 accumulation bound: (head_dim + heads + 8) roundings of 2^-24."""
    return bool(((out.double() - expect).abs() <= (head_dim + heads + 8) * 2.0 ** -24 * bound).all())


@pytest.mark.machinery
def test_prefill_logits_conventions(device):
    """Rows whose window starts at key 0 (the kernel walks tiles of 128 keys from the window's
    start, so these avoid its misaligned-start disagreement, judged by the accuracy suites):
    every visible logit where the contract puts it, -inf elsewhere."""
    case = Case("fp8_mqa_logits", tokens=3, device=device, heads=4, context=200)
    inputs = get_spec("fp8_mqa_logits").make_inputs(case)
    inputs["cu_seqlen_ks"] = torch.zeros_like(inputs["cu_seqlen_ks"])
    inputs["cu_seqlen_ke"] = torch.tensor([1, 150, 200], dtype=torch.int32, device=device)
    k, scale = inputs["kv"]
    args = (inputs["q"], k, scale, inputs["weights"], inputs["cu_seqlen_ks"], inputs["cu_seqlen_ke"])
    out = registry.get("fp8_mqa_logits", "aiter-triton").fn(**inputs)
    expect = ref.mqa_logits(*args, torch.float64)
    assert torch.equal(torch.isneginf(out), torch.isneginf(expect))
    visible = torch.isfinite(expect)
    assert _within_fp32_bound(out[visible], expect[visible], ref.mqa_bound(*args)[visible],
                              k.shape[-1], 4)


def _per_token_cache(device, next_n=1, batch=2, heads=4, context=90):
    """Paged inputs on a cache of one slot per block (AITER's layout), from the spec's keys.
    max_model_len is a multiple of 64: AITER 0.1.7's paged kernels store whole chunks of 64
    keys, past max_model_len otherwise (a disagreement the accuracy suites judge)."""
    spec = get_spec("fp8_paged_mqa_logits")
    inputs = spec.make_inputs(Case("fp8_paged_mqa_logits", tokens=batch * next_n, device=device,
                                   heads=heads, next_n=next_n, context=context))
    d = inputs["q"].shape[-1]
    lens, tables, cache = inputs["context_lens"], inputs["block_tables"], inputs["kv_cache"]
    width = -(-int(lens.max()) // 64) * 64  # whole chunks of 64 keys: see the docstring
    blocks = torch.randperm(batch * width + 3, generator=torch.Generator().manual_seed(5))
    slots = blocks[:batch * width].view(batch, width).to(device=device, dtype=torch.int32)
    one = torch.randint(0, 256, (batch * width + 3, 1, 1, d + 4), dtype=torch.uint8,
                        generator=torch.Generator().manual_seed(6)).to(device)
    values, scales = ref.cache_views(one, d, 1)
    for b in range(batch):
        k, s = ref.gather_paged_keys(cache, tables, b, int(lens[b]), d, cache.shape[1])
        values[slots[b, :int(lens[b])].long(), 0] = k
        scales[slots[b, :int(lens[b])].long(), 0] = s
    return {**inputs, "kv_cache": one, "block_tables": slots, "max_model_len": width}


@pytest.mark.machinery
@pytest.mark.parametrize("impl", ["aiter-triton", "aiter-triton-ragged-k"])
def test_paged_logits_conventions(impl, device):
    """next_n = 1 on a one-slot-per-block cache: every logit of keys [0, context_len) equals the
    reference's (the key at context_len itself is where AITER 0.1.7's causal bound disagrees
    with the contract: judged by the accuracy suites)."""
    inputs = _per_token_cache(device)
    out = registry.get("fp8_paged_mqa_logits", impl).fn(**inputs)
    expect = ref.paged_logits(**inputs, dtype=torch.float64)
    assert out.shape == expect.shape
    for b, length in enumerate(inputs["context_lens"].tolist()):
        assert torch.allclose(out[b, :length].double(), expect[b, :length].double(), rtol=1e-5, atol=1e-6)


@pytest.mark.machinery
def test_stage1_entry_is_summed_over_heads(device):
    inputs = _per_token_cache(device, batch=1, heads=32, context=70)
    out = registry.get("fp8_paged_mqa_logits", "aiter-triton-stage1").fn(**inputs)
    expect = ref.paged_logits(**inputs, dtype=torch.float64)
    length = int(inputs["context_lens"][0])
    assert torch.allclose(out[0, :length].double(), expect[0, :length].double(), rtol=1e-5, atol=1e-6)


@pytest.mark.machinery
def test_ragged_metadata_is_each_requests_slots_back_to_back():
    lens = torch.tensor([2, 0, 3], dtype=torch.int32)
    tables = torch.tensor([[7, 8, -1], [-1, -1, -1], [4, 5, 6]], dtype=torch.int32)
    meta = aiter_triton.ragged_tables(lens, tables)
    assert meta["prefix_sum_context_lens"].tolist() == [0, 2, 2, 5]
    assert meta["kv_indices"].tolist() == [7, 8, 4, 5, 6]


UNSUPPORTED_CASES = {
    ("aiter-triton", "fp8_mqa_logits"): Case("fp8_mqa_logits", tokens=2, heads=3, context=40),
    ("aiter-triton-stage1", "fp8_paged_mqa_logits"): Case(
        "fp8_paged_mqa_logits", tokens=1, batch=1, heads=4, context=100),
}
"""Unsupported input classes a call can show safely: heads not a power of two (the wrapper
asserts), fewer than 32 heads for stage 1 (it asserts). Blocks of more than one slot are guarded
by inspection instead (test_blocks_of_more_than_one_slot_are_still_unsupported): the kernels
would index the block table per key, past its end, and read the cache at wild offsets."""


@pytest.mark.parametrize("impl,op", sorted(UNSUPPORTED_CASES))
def test_unsupported_inputs_still_fail(impl, op, device):
    """An input class declared unsupported is not judged by the sweeps; here it must still
    fail, or the entry hides nothing and must go (a fixed AITER release is noticed)."""
    record = registry.get(op, impl)
    case = dataclasses.replace(UNSUPPORTED_CASES[(impl, op)], device=device)
    assert record.unsupported_for(case), f"{case.id} is not declared unsupported for {impl}"
    try:
        passed = evaluate(get_spec(op), record, case).passed
    except Exception:  # noqa: BLE001  (an assertion of the wrapper, a compile error: unsupported)
        passed = False
    assert not passed, (f"{op}/{impl} now passes {case.id}: its Unsupported entry "
                        f"({record.unsupported_for(case)[0].reason[:80]}...) is stale; remove it")


@pytest.mark.machinery
@pytest.mark.parametrize("impl", [i for i, ops in aiter_triton.ENTRIES.items()
                                  if "fp8_paged_mqa_logits" in ops])
def test_blocks_of_more_than_one_slot_are_still_unsupported(impl):
    """The paged entries of this release take no block size (later ROCm/aiter wrappers take
    ``KVBlockSize``): when one does, PER_TOKEN_CACHE is stale and the adapter must pass it."""
    module_name, name = aiter_triton.ENTRIES[impl]["fp8_paged_mqa_logits"]
    modules, _ = load((f"{aiter_triton.PACKAGE}.{module_name}",))
    signature = inspect.signature(getattr(modules[f"{aiter_triton.PACKAGE}.{module_name}"], name))
    assert not any("block" in p.lower() and "size" in p.lower() for p in signature.parameters), (
        f"{name}{signature} takes a block size now: map it in harness/adapters/aiter_triton.py "
        "and narrow PER_TOKEN_CACHE")
    assert aiter_triton.PER_TOKEN_CACHE in registry.get("fp8_paged_mqa_logits", impl).unsupported
