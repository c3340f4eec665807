"""Liger-Kernel's mHC kernels (``liger_kernel.ops.mhc``), written for training.

Liger's conventions differ from vLLM's, and each difference is mapped here explicitly:
- the projection is ``phi`` of shape ``[m*H, m*(m+2)]`` (vLLM's ``fn`` transposed);
- ``hc_scale`` is three scalar tensors ``alpha_pre, alpha_post, alpha_res``;
- ``post_mix`` comes out as ``[T, m]`` (the contract has ``[T, m, 1]``);
- the residual-mixing matrix is applied **untransposed**: Liger's stream ``o`` takes
  ``sum_i h_res[o, i] * x_i`` where vLLM's stream ``j`` takes ``sum_i comb[i, j] * x_i``; Liger's
  Sinkhorn produces the same matrix as vLLM's ``comb_mix``, so ``mhc_post`` hands Liger the
  transpose;
- there is no ``hc_head`` kernel: it is composed from Liger's RMS-GEMM and weighted-sum kernels,
  with the m sigmoid gates in torch fp32.
Liger's autograd functions are called under ``no_grad`` (inference; no Sinkhorn history kept).
"""

from __future__ import annotations

import importlib

import torch

from harness.adapters.base import TF32_OPS, Adapter, namespace, triton_tf32_gemm
from kernels.mhc.ops import FUSED_AS_COMPOSITION

OPS = ("mhc_pre", "mhc_post", "mhc_fused_post_pre", "hc_head")


def discover():
    mhc = importlib.import_module("liger_kernel.ops.mhc")
    return namespace(coeffs=mhc.LigerMHCCoeffsFunction.apply, pre=mhc.LigerMHCPreFunction.apply,
                     post_res=mhc.LigerMHCPostResFunction.apply, mm_norm=mhc.mhc_mm_norm_fwd)


def _streams(residual: torch.Tensor) -> torch.Tensor:
    return residual.reshape(-1, *residual.shape[-2:]).contiguous()


def bind(api) -> dict:
    @torch.no_grad()
    def mhc_pre(residual, fn, hc_scale, hc_base, rms_eps, hc_pre_eps, hc_sinkhorn_eps,
                hc_post_mult_value, sinkhorn_repeat):
        lead, (m, h) = residual.shape[:-2], residual.shape[-2:]
        x = _streams(residual)
        h_pre, h_post, h_res = api.coeffs(
            x, fn.t().contiguous(), hc_base.contiguous(), hc_scale[0], hc_scale[1], hc_scale[2],
            False, sinkhorn_repeat, rms_eps, hc_pre_eps, hc_sinkhorn_eps, hc_post_mult_value)
        layer_input = api.pre(x, h_pre)
        return (h_post.reshape(*lead, m, 1), h_res.reshape(*lead, m, m),
                layer_input.reshape(*lead, h))

    @torch.no_grad()
    def mhc_post(x, residual, post_layer_mix, comb_res_mix):
        m, h = residual.shape[-2:]
        out = api.post_res(_streams(residual), x.reshape(-1, h).contiguous(),
                           post_layer_mix.reshape(-1, m).contiguous(),
                           comb_res_mix.reshape(-1, m, m).transpose(-1, -2).contiguous())
        return out.reshape(residual.shape)

    def mhc_fused_post_pre(x, residual, post_layer_mix, comb_res_mix, fn, hc_scale, hc_base,
                           rms_eps, hc_pre_eps, hc_sinkhorn_eps, hc_post_mult_value,
                           sinkhorn_repeat):
        new_residual = mhc_post(x, residual, post_layer_mix, comb_res_mix)
        return (new_residual, *mhc_pre(new_residual, fn, hc_scale, hc_base, rms_eps, hc_pre_eps,
                                       hc_sinkhorn_eps, hc_post_mult_value, sinkhorn_repeat))

    @torch.no_grad()
    def hc_head(hidden_states, hc_fn, hc_scale, hc_base, rms_eps, hc_eps):
        lead, (m, h) = hidden_states.shape[:-2], hidden_states.shape[-2:]
        x = _streams(hidden_states)
        mixes, _ = api.mm_norm(x.view(x.shape[0], m * h), hc_fn.t().contiguous(), rms_eps)
        pre = torch.sigmoid(mixes * hc_scale[0] + hc_base) + hc_eps
        return api.pre(x, pre.contiguous()).reshape(*lead, h)

    return {"liger": {"mhc_pre": mhc_pre, "mhc_post": mhc_post,
                      "mhc_fused_post_pre": mhc_fused_post_pre, "hc_head": hc_head}}


ADAPTER = Adapter(
    name="liger", package="liger_kernel",
    install_hint="pip install --no-deps liger-kernel (a 1 MB wheel; its Triton kernels run under "
                 "the interpreter on CPU)",
    ops={"liger": OPS}, discover=discover, bind=bind, triton=frozenset({"liger"}),
    declared={"liger": {op: (triton_tf32_gemm() if op in TF32_OPS else {})
                        | (FUSED_AS_COMPOSITION if op == "mhc_fused_post_pre" else {})
                        for op in OPS}})
