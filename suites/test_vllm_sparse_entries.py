"""vLLM's sparse-indexer entries (``rocm_aiter_mla_sparse``), bound for real: each entry the
release exports is registered or explained; what vLLM declares differently from the contract
(its Triton writer's 16x16-tiled blocks, its Triton logits written only inside the window) is
judged as declared, and each declaration is load-bearing: without it the same outputs fail, so
a declaration cannot hide a bug elsewhere. The accuracy suites sweep these entries like any
implementation; this suite guards the binding and the declarations."""

import dataclasses
import importlib.util

import pytest

from harness import adapters, families
from harness.core import registry
from harness.adapters.vllm_sparse import SPARSE_ENTRIES, SPARSE_MODULE, UNSUPPORTED
from harness.evaluate import evaluate
from harness.core.cases import Case
from harness.core.specs import get_spec

pytestmark = pytest.mark.skipif(importlib.util.find_spec("vllm") is None
                                or "vllm" not in adapters.selected(),
                                reason="vLLM is not installed (bash scripts/install.sh puts the "
                                       "pinned release in), or HARNESS_ADAPTERS leaves its "
                                       "adapter out")
pytestmark = [pytestmark, pytest.mark.implementation("vllm-torch", "vllm-triton")]

BOUND = [(impl, op) for impl, ops in SPARSE_ENTRIES.items() for op in ops]


@pytest.fixture(scope="module", autouse=True)
def builtins():
    families.load()


@pytest.mark.parametrize("impl,op", BOUND)
def test_every_sparse_entry_is_bound_or_explained(impl, op):
    record = registry.get(op, impl)
    entry = SPARSE_ENTRIES[impl][op]
    assert record.available or entry in record.reason or SPARSE_MODULE in record.reason, (
        f"{op}/{impl} is unavailable without naming {entry}: {record.reason}")


UNSUPPORTED_CASES = {
    ("vllm-torch", "fp8_paged_mqa_logits"): (Case("fp8_paged_mqa_logits", tokens=6, batch=3,
                                                  next_n=2, context=300, heads=4),),
    ("vllm-triton", "fp8_paged_mqa_logits"): (Case("fp8_paged_mqa_logits", tokens=1, batch=1,
                                                   context=64, heads=3),
                                              Case("fp8_paged_mqa_logits", tokens=3, batch=3,
                                                   context=300, heads=4, block_size=16)),
}
"""One case per Unsupported entry of each (implementation, op), in the entries' order."""


@pytest.mark.parametrize("impl,op,entry", [(i, o, n) for i, ops in UNSUPPORTED.items()
                                           for o, entries in ops.items()
                                           for n in range(len(entries))])
def test_unsupported_inputs_still_fail(impl, op, entry, device):
    """An input class declared unsupported is not judged by the sweep; here it must still fail,
    or the entry hides nothing and must go (a fixed vLLM release is noticed)."""
    record = registry.get(op, impl)
    if not record.available:
        pytest.skip(f"{op}/{impl} cannot run here: {record.reason}")
    case = dataclasses.replace(UNSUPPORTED_CASES[(impl, op)][entry], device=device)
    assert UNSUPPORTED[impl][op][entry].applies(case), (
        f"{case.id} is not the case of {impl}'s Unsupported entry {entry}")
    try:
        passed = evaluate(get_spec(op), record, case).passed
    except Exception:  # noqa: BLE001  (fails to compile or launch: still unsupported)
        passed = False
    assert not passed, (f"{op}/{impl} now passes {case.id}: its Unsupported entry "
                           f"({record.unsupported_for(case)[0].reason[:80]}...) is stale; remove it")
