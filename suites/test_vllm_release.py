"""The installed vLLM release, bound for real: every mHC entry it exports for a backend is either
registered (and then swept by the mHC suites like any implementation) or reported "not run
here" with the exact symbol and why. Guards against adapters written to guessed names."""

import importlib
import importlib.util
import inspect

import pytest

from harness import adapters, families
from harness.core import registry
from harness.adapters.vllm import ENTRY_NAMES, MHC_BACKENDS, MHC_MODULE
from harness.core.device import has_gpu
from kernels.mhc.ops import MHC_OPS

pytestmark = pytest.mark.skipif(importlib.util.find_spec("vllm") is None
                                or "vllm" not in adapters.selected(),
                                reason="vLLM is not installed (bash scripts/install.sh puts the "
                                       "pinned release in), or HARNESS_ADAPTERS leaves its "
                                       "adapter out")
pytestmark = [pytestmark, pytest.mark.implementation("vllm-torch", "vllm-triton", "vllm-tilelang",
                                                     "vllm-cpu", "vllm-aiter")]


@pytest.fixture(scope="module")
def mhc_module():
    families.load()
    return importlib.import_module(MHC_MODULE)


@pytest.mark.parametrize("backend", MHC_BACKENDS)
def test_every_exported_mhc_entry_is_bound_or_explained(mhc_module, backend):
    for op in MHC_OPS:
        names = [n.format(backend) for n in ENTRY_NAMES[op]]
        exported = [n for n in names if callable(getattr(mhc_module, n, None))]
        record = registry.get(op, f"vllm-{backend}")
        if record.available:
            assert exported, f"{op}/vllm-{backend} registered, but vLLM exports none of {names}"
            continue
        named = exported[0] if exported else names[0]
        assert named in record.reason, (op, backend, record.reason)


def test_release_runs_its_torch_and_triton_mhc_here(mhc_module):
    """What must run on any machine with the pinned release: the torch backend's mhc_pre and
    mhc_post, and the Triton hc_head (interpreted on CPU)."""
    for op, impl in (("mhc_pre", "vllm-torch"), ("mhc_post", "vllm-torch"),
                     ("hc_head", "vllm-triton")):
        record = registry.get(op, impl)
        assert record.available, f"{op}/{impl}: {record.reason}"


@pytest.mark.skipif(has_gpu(), reason="on a GPU host vLLM's compiled ops may load")
def test_compiled_entries_name_the_missing_symbol_on_a_cpu_torch(mhc_module):
    reason = registry.get("mhc_pre", "vllm-cpu").reason
    assert "torch.ops._C.hc_pre_fused_cpu" in reason, reason
    reason = registry.get("top_k_per_row_decode", "vllm").reason
    assert "torch.ops._C.top_k_per_row_decode" in reason, reason


def test_vllm_version_and_commit_are_in_the_report_environment():
    from harness.environment import environment

    env = environment()
    assert env["vllm"] not in ("absent", "") and env.get("vllm_commit"), env
    assert inspect.isfunction(registry.get("mhc_post", "vllm-torch").fn)
