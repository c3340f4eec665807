"""Torch reference of the mHC ops, exactly per the contract (Sinkhorn order, eps placement).

The registered ``torch`` implementations compute in float32 like vLLM's reference; the op specs
call the same code with ``compute_dtype=torch.float64`` to get the harness's ground truth.
"""

from __future__ import annotations

import torch

from harness.core.registry import register
from kernels.mhc import validate


def rms_mixes(x: torch.Tensor, fn: torch.Tensor, rms_eps: float) -> torch.Tensor:
    """``(x @ fn^T) * rsqrt(mean(x^2) + eps)`` over the flattened streams: [T, n_mix]."""
    return (x @ fn.t()) * torch.rsqrt(x.square().mean(dim=-1, keepdim=True) + rms_eps)


def sinkhorn(comb_logits: torch.Tensor, eps: float, repeat: int) -> torch.Tensor:
    """softmax over rows + eps, one column normalisation, then (repeat-1) row/column rounds."""
    comb = torch.softmax(comb_logits, dim=-1) + eps
    comb = comb / (comb.sum(dim=-2, keepdim=True) + eps)
    for _ in range(repeat - 1):
        comb = comb / (comb.sum(dim=-1, keepdim=True) + eps)
        comb = comb / (comb.sum(dim=-2, keepdim=True) + eps)
    return comb


def pre_gates(mixes, hc_scale, hc_base, m, hc_pre_eps, hc_sinkhorn_eps, hc_post_mult_value,
              sinkhorn_repeat):
    """(pre [T, m], post_mix [T, m, 1], comb_mix [T, m, m]) from the raw mixes."""
    pre = torch.sigmoid(mixes[:, :m] * hc_scale[0] + hc_base[:m]) + hc_pre_eps
    post = torch.sigmoid(mixes[:, m:2 * m] * hc_scale[1] + hc_base[m:2 * m]) * hc_post_mult_value
    comb_logits = mixes[:, 2 * m:].reshape(-1, m, m) * hc_scale[2] + hc_base[2 * m:].view(1, m, m)
    return pre, post.unsqueeze(-1), sinkhorn(comb_logits, hc_sinkhorn_eps, sinkhorn_repeat)


def mhc_pre_compute(residual, fn, hc_scale, hc_base, rms_eps, hc_pre_eps, hc_sinkhorn_eps,
                    hc_post_mult_value, sinkhorn_repeat, *, compute_dtype=torch.float32,
                    round_output=True):
    m, h = validate.check_pre(residual, fn, hc_scale, hc_base, sinkhorn_repeat)
    lead = residual.shape[:-2]
    res = residual.reshape(-1, m, h).to(compute_dtype)
    mixes = rms_mixes(res.reshape(-1, m * h), fn.to(compute_dtype), rms_eps)
    pre, post, comb = pre_gates(mixes, hc_scale.to(compute_dtype), hc_base.to(compute_dtype), m,
                                hc_pre_eps, hc_sinkhorn_eps, hc_post_mult_value, sinkhorn_repeat)
    layer_input = (pre.unsqueeze(-1) * res).sum(dim=1)
    if round_output:
        post, comb, layer_input = post.float(), comb.float(), layer_input.to(residual.dtype)
    return (post.reshape(*lead, m, 1), comb.reshape(*lead, m, m), layer_input.reshape(*lead, h))


def mhc_post_compute(x, residual, post_layer_mix, comb_res_mix, *, compute_dtype=torch.float32,
                     round_output=True):
    validate.check_post(x, residual, post_layer_mix, comb_res_mix)
    mixed = torch.einsum("...ij,...ih->...jh", comb_res_mix.to(compute_dtype),
                         residual.to(compute_dtype))
    out = mixed + post_layer_mix.to(compute_dtype) * x.unsqueeze(-2).to(compute_dtype)
    return out.to(residual.dtype) if round_output else out


def hc_head_compute(hidden_states, hc_fn, hc_scale, hc_base, rms_eps, hc_eps, *,
                    compute_dtype=torch.float32, round_output=True):
    m, h = validate.check_head(hidden_states, hc_fn, hc_scale, hc_base)
    lead = hidden_states.shape[:-2]
    hs = hidden_states.reshape(-1, m, h).to(compute_dtype)
    mixes = rms_mixes(hs.reshape(-1, m * h), hc_fn.to(compute_dtype), rms_eps)
    pre = torch.sigmoid(mixes * hc_scale.to(compute_dtype).reshape(()) + hc_base.to(compute_dtype))
    out = ((pre + hc_eps).unsqueeze(-1) * hs).sum(dim=1)
    out = out.to(hidden_states.dtype) if round_output else out
    return out.reshape(*lead, h)


@register("mhc_pre", "torch")
def mhc_pre(residual, fn, hc_scale, hc_base, rms_eps, hc_pre_eps, hc_sinkhorn_eps,
            hc_post_mult_value, sinkhorn_repeat, n_splits=1):
    return mhc_pre_compute(residual, fn, hc_scale, hc_base, rms_eps, hc_pre_eps, hc_sinkhorn_eps,
                           hc_post_mult_value, sinkhorn_repeat)


@register("mhc_post", "torch")
def mhc_post(x, residual, post_layer_mix, comb_res_mix):
    return mhc_post_compute(x, residual, post_layer_mix, comb_res_mix)


@register("mhc_fused_post_pre", "torch")
def mhc_fused_post_pre(x, residual, post_layer_mix, comb_res_mix, fn, hc_scale, hc_base, rms_eps,
                       hc_pre_eps, hc_sinkhorn_eps, hc_post_mult_value, sinkhorn_repeat,
                       n_splits=1):
    new_residual = mhc_post(x, residual, post_layer_mix, comb_res_mix)
    return (new_residual, *mhc_pre(new_residual, fn, hc_scale, hc_base, rms_eps, hc_pre_eps,
                                   hc_sinkhorn_eps, hc_post_mult_value, sinkhorn_repeat))


@register("hc_head", "torch")
def hc_head(hidden_states, hc_fn, hc_scale, hc_base, rms_eps, hc_eps):
    return hc_head_compute(hidden_states, hc_fn, hc_scale, hc_base, rms_eps, hc_eps)
