"""Every declaration that widens how an implementation is judged is needed, each on its own:
without it (the others kept) the same outputs fail, so no declaration can hide a bug elsewhere.
The declarations that change a comparison: an accumulation class other than fp32 (TF32 mHC
GEMMs, fp8 tensor-core logits), a K-cache layout, approximate fp32 division, logits left
unwritten outside the window. Declarations that hold only where a kernel is compiled for a GPU
are made only there (the CPU interpreter computes in fp32 and divides exactly)."""

import dataclasses

import pytest

from harness import families
from harness.core.cases import Case
from harness.core.device import has_gpu
from harness.core.ops import op_names
from harness.core.registry import records
from harness.core.specs import get_spec
from harness.evaluate import evaluate

pytestmark = pytest.mark.machinery


JUDGED = ("kv_layout", "fp32_division", "outside_window")
"""Declared keys a spec compares by (accumulation is the Implementation's own field)."""
GPU = has_gpu()
MHC_CASE = {"tokens": 33, "hidden": 4096 if GPU else 200}
CASES = {
    "mhc_pre": MHC_CASE, "mhc_post": MHC_CASE, "mhc_fused_post_pre": MHC_CASE,
    "hc_head": MHC_CASE,
    "indexer_k_quant_and_cache": {"tokens": 4099 if GPU else 67, "scale_fmt": None},
    "fp8_mqa_logits": ({"tokens": 257, "heads": 64, "seqs": 3, "context": 2048} if GPU else
                       {"tokens": 65, "heads": 8, "seqs": 2, "context": 256}),
    "fp8_paged_mqa_logits": ({"tokens": 16, "batch": 16, "next_n": 1, "context": 4096,
                              "heads": 64} if GPU else
                             {"tokens": 6, "batch": 3, "next_n": 2, "context": 300, "heads": 4}),
}
"""Large enough on a GPU for each declared difference to show (the shipped fp8 paged logits
kernel stays within the fp32 bound on 300 keys and 4 heads; 2026-11-25, H100)."""


def _declarations():
    families.load()
    found = []
    for op in op_names():
        for name, impl in sorted(records(op).items()):
            if not impl.available:
                continue
            keys = ["accumulation"] if impl.accumulation != "fp32" else []
            keys += [k for k in JUDGED if k in impl.declared]
            found += [(op, name, key) for key in keys]
    return found


DECLARATIONS = _declarations()


def _without(impl, key):
    if key == "accumulation":
        return dataclasses.replace(impl, accumulation="fp32")
    return dataclasses.replace(impl, declared={k: v for k, v in impl.declared.items() if k != key})


@pytest.mark.parametrize("op,impl,key", DECLARATIONS,
                         ids=[f"{o}-{i}-{k}" for o, i, k in DECLARATIONS] or None)
def test_each_declaration_is_needed_on_its_own(op, impl, key, device, record):
    if op not in CASES:
        pytest.fail(f"{op} has a declaration ({impl}: {key}) but no case here to prove it "
                    "needed: add one to CASES")
    record_ = records(op)[impl]
    params = dict(CASES[op])
    case = Case(op, tokens=params.pop("tokens"), hidden=params.pop("hidden", 0), device=device,
                params=tuple(params.items()))
    declared = evaluate(get_spec(op), record_, case)
    record(declared.rows)
    assert declared.passed, f"{impl} fails {case.id} as declared: {declared.failures()}"
    stripped = evaluate(get_spec(op), _without(record_, key), case)
    value = record_.accumulation if key == "accumulation" else record_.declared[key]
    assert not stripped.passed, (
        f"{op}/{impl} passes {case.id} without its declaration {key}={value!r}: the declaration "
        "widens the comparison for nothing here; remove it (or make it only where it holds)")
