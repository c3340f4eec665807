"""Argument checks of the mHC contract, shared by every shipped backend.

Each error names the argument, what was given and what the contract wants, so a caller can fix
the call without reading the kernel. The checks read metadata only, so each runs once per call
signature (``kernels.runtime.memo``).
"""

from __future__ import annotations

import torch

from kernels.runtime.errors import ContractError, require  # noqa: F401  (re-exported: raised by these checks)
from kernels.runtime.memo import per_signature


def _want(cond: bool, msg) -> None:
    require(cond, msg, section=1)


def _dtype(name: str, t: torch.Tensor, dtype: torch.dtype) -> None:
    _want(isinstance(t, torch.Tensor), lambda: f"{name} must be a torch.Tensor, got {type(t).__name__}")
    _want(t.dtype == dtype, lambda: f"{name} must be {dtype}, got {t.dtype}; convert it with .to({dtype})")


def residual_dims(residual: torch.Tensor, name: str = "residual") -> tuple[int, int]:
    _dtype(name, residual, torch.bfloat16)
    _want(residual.dim() >= 3, lambda: f"{name} must be [..., hc_mult, hidden], got shape "
          f"{tuple(residual.shape)}")
    return residual.shape[-2], residual.shape[-1]


@per_signature
def check_pre(residual, fn, hc_scale, hc_base, sinkhorn_repeat) -> tuple[int, int]:
    m, h = residual_dims(residual)
    mix = m * (m + 2)
    _dtype("fn", fn, torch.float32)
    _want(tuple(fn.shape) == (mix, m * h), lambda: f"fn must be [m*(m+2), m*H] = [{mix}, {m * h}] for "
          f"residual {tuple(residual.shape)}, got {tuple(fn.shape)}")
    _dtype("hc_scale", hc_scale, torch.float32)
    _want(tuple(hc_scale.shape) == (3,), lambda: f"hc_scale must be [3], got {tuple(hc_scale.shape)}")
    _dtype("hc_base", hc_base, torch.float32)
    _want(tuple(hc_base.shape) == (mix,), lambda: f"hc_base must be [{mix}], got {tuple(hc_base.shape)}")
    _want(int(sinkhorn_repeat) >= 1, lambda: f"sinkhorn_repeat must be >= 1, got {sinkhorn_repeat}")
    _same_device(residual, fn, hc_scale, hc_base)
    return m, h


@per_signature
def check_post(x, residual, post_layer_mix, comb_res_mix) -> tuple[int, int]:
    m, h = residual_dims(residual)
    lead = tuple(residual.shape[:-2])
    _dtype("x", x, torch.bfloat16)
    _want(tuple(x.shape) == lead + (h,), lambda: f"x must be [..., H] = {lead + (h,)}, got {tuple(x.shape)}")
    _dtype("post_layer_mix", post_layer_mix, torch.float32)
    _want(tuple(post_layer_mix.shape) == lead + (m, 1),
          lambda: f"post_layer_mix must be {lead + (m, 1)}, got {tuple(post_layer_mix.shape)}")
    _dtype("comb_res_mix", comb_res_mix, torch.float32)
    _want(tuple(comb_res_mix.shape) == lead + (m, m),
          lambda: f"comb_res_mix must be {lead + (m, m)}, got {tuple(comb_res_mix.shape)}")
    _same_device(x, residual, post_layer_mix, comb_res_mix)
    return m, h


@per_signature
def check_head(hidden_states, hc_fn, hc_scale, hc_base) -> tuple[int, int]:
    m, h = residual_dims(hidden_states, "hidden_states")
    _dtype("hc_fn", hc_fn, torch.float32)
    _want(tuple(hc_fn.shape) == (m, m * h), lambda: f"hc_fn must be [m, m*H] = [{m}, {m * h}], got "
          f"{tuple(hc_fn.shape)}")
    _dtype("hc_scale", hc_scale, torch.float32)
    _want(hc_scale.numel() == 1, lambda: f"hc_scale must have 1 element, got {tuple(hc_scale.shape)}")
    _dtype("hc_base", hc_base, torch.float32)
    _want(tuple(hc_base.shape) == (m,), lambda: f"hc_base must be [{m}], got {tuple(hc_base.shape)}")
    _same_device(hidden_states, hc_fn, hc_scale, hc_base)
    return m, h


def _same_device(*tensors: torch.Tensor) -> None:
    devices = {t.device for t in tensors}
    _want(len(devices) == 1, lambda: f"all tensors must be on one device, got {sorted(map(str, devices))}")
