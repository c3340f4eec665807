"""vLLM: the mHC backends of the installed release, found by inspection, and its compiled ops.

``vllm.model_executor.kernels.mhc`` keeps one module per backend; each is one implementation
here, ``vllm-<backend>``. An op binds to the first name in ``ENTRY_NAMES`` that the installed
release exports for that backend, called with the contract's arguments by name
(:mod:`harness.adapters.signature`); ``ALIASES`` lists the parameter names a release spells
differently. What the release lacks, or cannot run here, is recorded with the exact symbol and
why: vLLM 0.33.0 has no ``mhc_pre_triton`` (only the pieces ``mhc_pre_mix_triton`` and
``hc_collapse_triton``), and its ``*_cpu`` backend calls compiled ``torch.ops._C`` kernels that
a CUDA wheel does not load on a CPU-only torch.

vLLM turns Triton off when no GPU driver is active. Under the Triton interpreter (a CPU machine)
the adapter hands vLLM's ``triton_utils`` the real Triton before its kernels are imported, so
vLLM's own Triton kernels run interpreted, as the harness's do.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import re

from harness.adapters.base import TF32_GEMM, TF32_OPS, Adapter, namespace, triton_tf32_gemm
from harness.adapters.deepgemm import LOGITS_OPS, deepgemm_logits
from harness.adapters.signature import bind_by_name
from harness.adapters.vllm_sparse import (COST_LIMITS, DECLARED, DEVIATIONS, SPARSE_ENTRIES,
                                          UNSUPPORTED, bind_sparse, discover_sparse)
from kernels.mhc.ops import MHC_OPS

MHC_MODULE = "vllm.model_executor.kernels.mhc"
MHC_BACKENDS = ("torch", "cpu", "triton", "tilelang", "aiter")
TF32_BACKENDS = ("tilelang", "aiter")
"""vLLM's mHC backends whose GEMM runs on TF32 tensor cores (its Triton one too, declared with
its sparse entries)."""
ENTRY_NAMES = {
    "mhc_pre": ("mhc_pre_{}",),
    "mhc_post": ("mhc_post_{}",),
    "mhc_fused_post_pre": ("mhc_fused_post_pre_{}",),
    "hc_head": ("hc_head_fused_{}", "hc_head_reduce_{}_kernel", "hc_head_fused_kernel_{}"),
}
ALIASES = {"hc_head": {"rms_norm_eps": "rms_eps", "norm_eps": "rms_eps", "x": "hidden_states",
                       "hs_flat": "hidden_states", "fn": "hc_fn"}}
BACKEND_PACKAGE = {"tilelang": "tilelang", "aiter": "aiter"}
"""Backends whose kernels need another package at call time."""


def _give_vllm_real_triton() -> None:
    from harness.core.device import has_gpu, triton_interpreted

    if has_gpu() or not triton_interpreted():
        return
    import triton
    import triton.language as tl

    utils = importlib.import_module("vllm.triton_utils")
    if not utils.HAS_TRITON:
        utils.HAS_TRITON, utils.triton, utils.tl = True, triton, tl


C_EXTENSIONS = ("vllm._C", "vllm._C_stable_libtorch")
"""vLLM's compiled ops: ``_C`` in CPU/ROCm builds, ``_C_stable_libtorch`` in the CUDA wheel."""


def _c_extension_error() -> str:
    """Empty when one of vLLM's compiled extensions loads, else why none does."""
    errors = []
    for name in C_EXTENSIONS:
        try:
            if getattr(importlib.import_module(name), "__file__", None):
                return ""
            errors.append(f"{name}: absent (the harness's stand-in is in its place)")
            continue
        except Exception as exc:  # ImportError, or an undefined symbol of another torch
            errors.append(f"{name}: {type(exc).__name__}: {str(exc).splitlines()[0][:120]}")
    return "; ".join(errors)


def stand_in_for_missing_extension(c_error: str) -> None:
    """Let vLLM's CUDA platform module import without vLLM's compiled extension.

    ``vllm/platforms/cuda.py`` imports ``vllm._C_stable_libtorch`` unconditionally, so on a GPU
    host whose torch is not the one vLLM's wheel was built for (or with the wheel's Python
    only), none of vLLM's Python kernels would import. An empty module stands in; the compiled
    ops stay unregistered and every entry that needs one is reported "not run here"."""
    import sys
    import types

    if not c_error or "vllm._C_stable_libtorch" in sys.modules:
        return
    sys.modules["vllm._C_stable_libtorch"] = types.ModuleType(
        "vllm._C_stable_libtorch", f"harness stand-in: vLLM's compiled extension is absent ({c_error})")


def import_vllm():
    """``vllm`` ready for its Python kernels to import here; returns (module, why its compiled
    extension is not loaded, or "")."""
    vllm = importlib.import_module("vllm")
    c_error = _c_extension_error()
    stand_in_for_missing_extension(c_error)
    _give_vllm_real_triton()
    return vllm, c_error


def discover():
    import torch

    vllm, c_error = import_vllm()
    mhc = importlib.import_module(MHC_MODULE)
    sparse, sparse_error = discover_sparse()
    try:
        deep_gemm = importlib.import_module("vllm.utils.deep_gemm")
    except ImportError:
        deep_gemm = None
    return namespace(
        version=getattr(vllm, "__version__", "?"), mhc=mhc, c_error=c_error,
        c_ops=getattr(torch.ops, "_C", None), cache_ops=getattr(torch.ops, "_C_cache_ops", None),
        triton_on=importlib.import_module("vllm.triton_utils").HAS_TRITON, deep_gemm=deep_gemm,
        sparse=sparse, sparse_error=sparse_error)


def _compiled_ops_missing(fn, api) -> list[str]:
    """The ``ops.<name>(`` calls in ``fn``'s source whose ``torch.ops._C.<name>`` is absent."""
    try:
        source = inspect.getsource(fn)
    except (OSError, TypeError):
        return []
    names = sorted(set(re.findall(r"\bops\.(\w+)\(", source)))
    return [n for n in names if not _has_op(getattr(api, "c_ops", None), n)]


def _has_op(namespace_, name: str) -> bool:
    try:
        return namespace_ is not None and getattr(namespace_, name, None) is not None
    except (AttributeError, RuntimeError):
        return False


def _flat_tokens(fn):
    """hc_head kernels that want ``[T, m, H]``: flatten the contract's leading dims."""
    def call(hidden_states, *args, **kwargs):
        lead, (m, h) = hidden_states.shape[:-2], hidden_states.shape[-2:]
        return fn(hidden_states.reshape(-1, m, h), *args, **kwargs).view(*lead, h)
    return call


def _hc_head_out(hidden_states, **_):
    import torch

    return torch.empty(hidden_states.shape[0], hidden_states.shape[-1], dtype=hidden_states.dtype,
                       device=hidden_states.device)


def _importable(package: str) -> bool:
    import sys

    if package in sys.modules:
        return sys.modules[package] is not None
    return importlib.util.find_spec(package) is not None


def _why_backend_cannot_run(backend: str, api) -> str | None:
    package = BACKEND_PACKAGE.get(backend)
    if package and not _importable(package):
        return f"vLLM's {backend} backend needs the {package} package, which is not installed"
    if backend == "aiter":
        import torch

        if torch.version.hip is None:
            return "vLLM's aiter backend runs on ROCm only (this torch has no HIP)"
    if backend == "triton" and not getattr(api, "triton_on", False):
        return ("vLLM disabled Triton here (no active GPU driver); on a CPU machine run with "
                "TRITON_INTERPRET=1 so the harness runs vLLM's Triton kernels interpreted")
    return None


def find_mhc_entry(module, backend: str, op: str):
    """The first of ``ENTRY_NAMES[op]`` for ``backend`` that ``module`` exports, or why none."""
    names = [n.format(backend) for n in ENTRY_NAMES[op]]
    fn = next((getattr(module, n) for n in names if callable(getattr(module, n, None))), None)
    return fn if fn is not None else (
        f"{getattr(module, '__name__', '?')} exports none of {', '.join(names)}")


def bind_mhc_entry(op: str, fn):
    """A vLLM-convention mHC function as a contract function (or why it cannot be one)."""
    wants_3d = "out" in inspect.signature(fn).parameters or "hs_flat" in inspect.signature(
        fn).parameters
    call = bind_by_name(op, fn, aliases=ALIASES.get(op),
                        make_out=_hc_head_out if op == "hc_head" else None)
    return _flat_tokens(call) if (wants_3d and callable(call)) else call


def _bind_mhc(backend: str, api) -> dict:
    mhc = getattr(api, "mhc", None)
    if mhc is None:
        return {}
    bound: dict = {}
    blocked = _why_backend_cannot_run(backend, api)
    for op in MHC_OPS:
        fn = find_mhc_entry(mhc, backend, op)
        if isinstance(fn, str):
            bound[op] = f"vLLM {getattr(api, 'version', '?')}: {fn}"
            continue
        missing = _compiled_ops_missing(fn, api)
        if blocked or missing:
            bound[op] = f"{fn.__name__}: " + (blocked or (
                f"needs torch.ops._C.{', torch.ops._C.'.join(missing)}, which vLLM's compiled "
                f"extension does not provide here ({api.c_error or 'not registered'})"))
            continue
        bound[op] = bind_mhc_entry(op, fn)
    return bound


def _compiled(api) -> dict:
    own = {}
    for op, space, name in (("top_k_per_row_prefill", "c_ops", "top_k_per_row_prefill"),
                            ("top_k_per_row_decode", "c_ops", "top_k_per_row_decode"),
                            ("indexer_k_quant_and_cache", "cache_ops", "indexer_k_quant_and_cache")):
        ns = getattr(api, space, None)
        own[op] = getattr(ns, name) if _has_op(ns, name) else (
            f"torch.ops.{'_C' if space == 'c_ops' else '_C_cache_ops'}.{name} is not registered "
            f"here ({getattr(api, 'c_error', '') or 'vLLM compiled extension not loaded'}); "
            "it runs on a CUDA/ROCm host with vLLM's compiled build")
    return own


def bind(api) -> dict:
    bound = {f"vllm-{b}": _bind_mhc(b, api) for b in MHC_BACKENDS}
    sparse = bind_sparse(getattr(api, "sparse", None),
                         getattr(api, "sparse_error", "") or "vLLM's sparse module not found",
                         {impl: _why_backend_cannot_run(impl.removeprefix("vllm-"), api)
                          for impl in SPARSE_ENTRIES})
    for impl, ops in sparse.items():
        bound[impl].update(ops)
    bound["vllm"] = _compiled(api)
    if getattr(api, "deep_gemm", None) is not None:
        bound["vllm-deepgemm"] = deepgemm_logits(api.deep_gemm)
    return bound


ADAPTER = Adapter(
    name="vllm", package="vllm",
    install_hint="install vLLM (bash scripts/install.sh puts the pinned wheel's Python in; or "
                 "your build with pip install -e .) to test it",
    ops={**{f"vllm-{b}": MHC_OPS + tuple(SPARSE_ENTRIES.get(f"vllm-{b}", ()))
            for b in MHC_BACKENDS},
         "vllm": ("top_k_per_row_prefill", "top_k_per_row_decode", "indexer_k_quant_and_cache"),
         "vllm-deepgemm": LOGITS_OPS},
    discover=discover, bind=bind, accumulation={"vllm-deepgemm": "fp8-mma"},
    declared={**{f"vllm-{b}": {op: TF32_GEMM for op in TF32_OPS} for b in TF32_BACKENDS},
              "vllm-triton": {**{op: triton_tf32_gemm() for op in TF32_OPS},
                              **DECLARED["vllm-triton"]},
              "vllm-torch": DECLARED["vllm-torch"]},
    triton=frozenset({"vllm-triton", "vllm-tilelang"}),
    deviations=DEVIATIONS, cost_limits=COST_LIMITS, unsupported=UNSUPPORTED,
    notice=lambda api: (f"vLLM {api.version}: its compiled extension is not loaded here "
                        f"({api.c_error.split(';')[0]}), so its Python and Triton kernels are "
                        "judged and its compiled ops are listed under 'Not run here'"
                        if getattr(api, "c_error", "") else ""),
    quiet_loggers=("vllm",))
