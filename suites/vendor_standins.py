"""Stand-in vendor packages: the call signatures and conventions of vLLM, AITER, TileLang,
DeepGEMM and Liger-Kernel, computed with the harness's torch reference.

They let the adapters' argument mapping run in CI, where none of those packages (except Liger)
installs. Each stand-in follows its vendor's convention, not the contract: AITER's ``mhc_post``
fills a caller-made ``out``; Liger's post applies the mixing matrix untransposed. ``CALLS``
records every call so tests can check what the adapter passed.
"""

from __future__ import annotations

import functools
import inspect
import sys
import types

import torch

from kernels.mhc import torch as mhc_ref
from kernels.topk import torch as topk_ref

CALLS: list[tuple[str, tuple, dict]] = []


def recorded(name, fn):
    @functools.wraps(fn)  # keeps the vendor's signature visible to adapters that bind by name
    def call(*args, **kwargs):
        CALLS.append((name, args, kwargs))
        return fn(*args, **kwargs)

    return call


def module(name: str, **attrs) -> types.ModuleType:
    mod = types.ModuleType(name)
    for key, value in attrs.items():
        setattr(mod, key, recorded(f"{name}.{key}", value) if callable(value) else value)
    return mod


def install(monkeypatch, modules: dict[str, types.ModuleType]) -> None:
    for name, mod in modules.items():
        monkeypatch.setitem(sys.modules, name, mod)
    for name in modules:
        parent, _, child = name.rpartition(".")
        if parent in modules:
            monkeypatch.setattr(modules[parent], child, modules[name], raising=False)


def _logits_recorder(kind):
    def fn(*args, **kwargs):
        return ("logits", kind, args, kwargs)

    return fn


def _vllm_hc_head_reduce_triton_kernel(x, hc_fn, hc_scale, hc_base, out, norm_eps, hc_eps):
    """vLLM 0.33.0: writes into a caller-made ``out`` [T, H]; takes ``x`` as [T, m, H] only."""
    assert x.dim() == 3, "hc_head_reduce_triton_kernel takes [tokens, hc_mult, hidden] only"
    out.copy_(mhc_ref.hc_head(x, hc_fn, hc_scale, hc_base, norm_eps, hc_eps))


def _vllm_hc_head_tilelang(hs_flat, fn, hc_scale, hc_base, rms_eps, hc_eps):
    assert hs_flat.dim() == 3, "hc_head_fused_kernel_tilelang takes [tokens, hc_mult, hidden]"
    return mhc_ref.hc_head(hs_flat, fn, hc_scale, hc_base, rms_eps, hc_eps)


def _tilelang_packed(fn, kernel: str):
    """vLLM's TileLang entries check a packed ``[T, m, H]`` ABI: other leading dims are refused."""
    signature = inspect.signature(fn)

    def call(*args, **kwargs):
        residual = signature.bind(*args, **kwargs).arguments["residual"]
        assert residual.dim() == 3, f"kernel {kernel} input residual ndim mismatch, expected 3"
        return fn(*args, **kwargs)
    functools.update_wrapper(call, fn)
    return call


def _vllm_hc_head_fused_cpu(hidden_states, hc_fn, hc_scale, hc_base, rms_norm_eps, hc_eps):
    return mhc_ref.hc_head(hidden_states, hc_fn, hc_scale, hc_base, rms_norm_eps, hc_eps)


def _vllm_mhc_pre(residual, fn, hc_scale, hc_base, rms_eps, hc_pre_eps, hc_sinkhorn_eps,
                  hc_post_mult_value, sinkhorn_repeat, n_splits=1):
    return mhc_ref.mhc_pre(residual, fn, hc_scale, hc_base, rms_eps, hc_pre_eps, hc_sinkhorn_eps,
                           hc_post_mult_value, sinkhorn_repeat)


def vllm_modules() -> dict[str, types.ModuleType]:
    """vLLM 0.33.0's layout and signatures: torch and cpu mHC backends, Triton only for hc_head
    (an output buffer and [T, m, H] input), ``rms_norm_eps`` in the cpu hc_head."""
    mhc = {"mhc_pre_torch": _vllm_mhc_pre, "mhc_post_torch": mhc_ref.mhc_post,
           "mhc_pre_cpu": _vllm_mhc_pre, "mhc_post_cpu": mhc_ref.mhc_post,
           "hc_head_fused_cpu": _vllm_hc_head_fused_cpu,
           "hc_head_reduce_triton_kernel": _vllm_hc_head_reduce_triton_kernel,
           "mhc_pre_mix_triton": lambda *a: None, "hc_collapse_triton": lambda *a: None}
    return {
        "vllm": module("vllm", __version__="0.33.0"),
        "vllm.model_executor": module("vllm.model_executor"),
        "vllm.model_executor.kernels": module("vllm.model_executor.kernels"),
        "vllm.model_executor.kernels.mhc": module("vllm.model_executor.kernels.mhc", **mhc),
        "vllm.model_executor.kernels.mhc.tilelang": module(
            "vllm.model_executor.kernels.mhc.tilelang",
            mhc_pre_tilelang=_tilelang_packed(_vllm_mhc_pre, "mhc_pre_tilelang"),
            mhc_post_tilelang=_tilelang_packed(mhc_ref.mhc_post, "mhc_post_tilelang"),
            mhc_fused_post_pre_tilelang=_tilelang_packed(mhc_ref.mhc_fused_post_pre,
                                                         "mhc_fused_post_pre_tilelang"),
            hc_head_fused_kernel_tilelang=_vllm_hc_head_tilelang),
        "vllm.triton_utils": module("vllm.triton_utils", HAS_TRITON=True),
        "vllm.utils": module("vllm.utils"),
        "vllm.utils.deep_gemm": deep_gemm_module("vllm.utils.deep_gemm"),
        "vllm._C": module("vllm._C"),
    }


VLLM_BOUND = (("mhc_pre", "vllm-torch"), ("mhc_post", "vllm-torch"), ("mhc_pre", "vllm-cpu"),
              ("mhc_post", "vllm-cpu"), ("hc_head", "vllm-cpu"), ("hc_head", "vllm-triton"))
"""What the vLLM adapter binds from these stand-ins (and from the real 0.33.0 on a CUDA host)."""


def vllm_c_ops() -> types.SimpleNamespace:
    """What ``torch.ops._C`` holds once vLLM's extension is loaded."""
    return types.SimpleNamespace(
        top_k_per_row_prefill=recorded("_C.top_k_per_row_prefill", topk_ref.top_k_per_row_prefill),
        top_k_per_row_decode=recorded("_C.top_k_per_row_decode", topk_ref.top_k_per_row_decode))


def deep_gemm_module(name="deep_gemm") -> types.ModuleType:
    return module(name, fp8_mqa_logits=_logits_recorder("prefill"),
                  fp8_paged_mqa_logits=_logits_recorder("paged"),
                  get_paged_mqa_logits_metadata=lambda lens, block, sms: ("meta", block, sms))


def _aiter_mhc_pre(residual, fn, hc_scale, hc_base, rms_eps=1e-6, hc_pre_eps=1e-6,
                   hc_sinkhorn_eps=1e-6, hc_post_mult_value=1.0, sinkhorn_repeat=20,
                   norm_weight=None, norm_eps=1e-6):
    assert residual.dim() == 3, "aiter.mhc_pre takes [m, hc_mult, hidden] only"
    if sinkhorn_repeat == 0:
        assert fn.shape[0] == residual.shape[1], "hc_head mode takes an fn of hc_mult rows"
        out = mhc_ref.hc_head(residual, fn, hc_scale[:1], hc_base, rms_eps, hc_pre_eps)
        t, m = residual.shape[:2]
        return (torch.empty(t, m, 1), torch.empty(t, m, m), out)
    return mhc_ref.mhc_pre(residual, fn, hc_scale, hc_base, rms_eps, hc_pre_eps, hc_sinkhorn_eps,
                           hc_post_mult_value, sinkhorn_repeat)


def _aiter_mhc_post(out, x, residual, post_layer_mix, comb_res_mix, store_nt=-1):
    out.copy_(mhc_ref.mhc_post(x, residual, post_layer_mix, comb_res_mix))


def _aiter_fused(layer_input, residual_in, post_layer_mix, comb_res_mix, fn, hc_scale, hc_base,
                 rms_eps=1e-6, hc_pre_eps=1e-6, hc_sinkhorn_eps=1e-6, hc_post_mult_value=1.0,
                 sinkhorn_repeat=20, norm_weight=None, norm_eps=1e-6, force_fused=False):
    new_residual, post, comb, out = mhc_ref.mhc_fused_post_pre(
        layer_input, residual_in, post_layer_mix, comb_res_mix, fn, hc_scale, hc_base, rms_eps,
        hc_pre_eps, hc_sinkhorn_eps, hc_post_mult_value, sinkhorn_repeat)
    return post, comb, out, new_residual


def _aiter_prefill(logits, rowStarts, rowEnds, indices, values, numRows, stride0, stride1,
                   k=2048, stable=False):
    topk_ref.top_k_per_row_prefill(logits, rowStarts, rowEnds, indices, numRows, stride0, stride1,
                                   k)


def _aiter_decode(logits, next_n, seqLens, indices, numRows, stride0, stride1, k=2048,
                  stable=False):
    topk_ref.top_k_per_row_decode(logits, next_n, seqLens, indices, numRows, stride0, stride1, k)


def aiter_modules() -> dict[str, types.ModuleType]:
    return {
        "aiter": module("aiter", mhc_pre=_aiter_mhc_pre, mhc_post=_aiter_mhc_post,
                        mhc_fused_post_pre=_aiter_fused,
                        indexer_k_quant_and_cache=lambda *a, **k: None),
        "aiter.ops": module("aiter.ops"),
        "aiter.ops.topk": module("aiter.ops.topk", top_k_per_row_prefill=_aiter_prefill,
                                 top_k_per_row_decode=_aiter_decode),
        "aiter.ops.triton": module("aiter.ops.triton"),
        "aiter.ops.triton.fp8_mqa_logits": module("aiter.ops.triton.fp8_mqa_logits",
                                                  fp8_mqa_logits=_logits_recorder("prefill")),
        "aiter.ops.triton.pa_mqa_logits": module(
            "aiter.ops.triton.pa_mqa_logits",
            deepgemm_fp8_paged_mqa_logits=_logits_recorder("paged")),
    }


def liger_api(untransposed: bool = True) -> types.SimpleNamespace:
    """Liger's entry points; ``untransposed=False`` gives a post kernel in vLLM's convention,
    which the Liger adapter (which transposes) must then get wrong."""

    def coeffs(x, phi, b, a_pre, a_post, a_res, allow_fp32, tmax, rms_eps, pre_eps, sinkhorn_eps,
               post_mult):
        n, m, h = x.shape
        mixes = mhc_ref.rms_mixes(x.reshape(n, m * h).float(), phi.t(), rms_eps)
        scale = torch.stack([a_pre, a_post, a_res])
        pre, post, comb = mhc_ref.pre_gates(mixes, scale, b, m, pre_eps, sinkhorn_eps, post_mult,
                                            tmax)
        return pre, post.squeeze(-1), comb

    def pre(x, h_pre):
        return (h_pre.unsqueeze(-1) * x.float()).sum(dim=1).to(x.dtype)

    def post_res(x, f_out, h_post, h_res):
        mix = h_res if untransposed else h_res.transpose(-1, -2)
        out = torch.einsum("noi,nic->noc", mix, x.float()) + h_post.unsqueeze(-1) * f_out.float()[:, None]
        return out.to(x.dtype)

    def mm_norm(x, phi, eps):
        mixes = mhc_ref.rms_mixes(x.float(), phi.t(), eps)
        return mixes, torch.rsqrt(x.float().square().mean(-1) + eps)

    return types.SimpleNamespace(coeffs=recorded("liger.coeffs", coeffs),
                                 pre=recorded("liger.pre", pre),
                                 post_res=recorded("liger.post_res", post_res),
                                 mm_norm=recorded("liger.mm_norm", mm_norm))
