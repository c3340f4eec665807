"""Op specs of the mHC family: realistic inputs and float64 ground truth.

Inputs model DeepSeek-V4 activations: residual streams ~ N(0, 1) scaled per token by a
log-normal factor (token norms differ by ~10x, exercising the RMS normalisation), ``fn`` scaled
by 1/sqrt(m*H) so the normalised mixes are O(1) and every gate is off its flat tails, and
constants from the model config (eps 1e-6, post multiplier 2, 20 Sinkhorn rounds).
"""

from __future__ import annotations

import math

import torch

from harness.core.cases import Case, generator
from harness.core.specs import OpSpec, contract, register_spec
from kernels.mhc import tolerances as mhc_tolerances
from kernels.mhc.torch import (hc_head_compute, mhc_post_compute, mhc_pre_compute, sinkhorn)

HC_MULT = 4
EPS = 1e-6
POST_MULT = 2.0
SINKHORN_REPEAT = 20
F64 = torch.float64
CASE_PARAMS = {"hc_mult": HC_MULT}
"""``hc_mult``: m, the number of hidden streams (DeepSeek-V4: 4). Tokens are T, ``hidden`` is H."""


def _rng(case: Case, salt: int) -> torch.Generator:
    return generator(case, salt, case.device)


def _randn(case: Case, salt: int, *shape: int) -> torch.Tensor:
    return torch.randn(*shape, generator=_rng(case, salt), device=case.device)


def streams(case: Case, salt: int, m: int) -> torch.Tensor:
    """[T, m, H] bf16 hidden streams with per-token scales spread over ~e^{+-1}."""
    t, h = case.tokens, case.hidden
    scale = torch.exp(0.5 * _randn(case, salt + 1, t, 1, 1))
    return (_randn(case, salt, t, m, h) * scale).to(torch.bfloat16)


def pre_params(case: Case, m: int, salt: int = 10) -> dict:
    k, n_mix = m * case.hidden, m * (m + 2)
    return {
        "fn": _randn(case, salt, n_mix, k) / math.sqrt(k),
        "hc_scale": 0.5 + torch.rand(3, generator=_rng(case, salt + 1), device=case.device),
        "hc_base": 0.5 * _randn(case, salt + 2, n_mix),
        "rms_eps": EPS, "hc_pre_eps": EPS, "hc_sinkhorn_eps": EPS,
        "hc_post_mult_value": POST_MULT, "sinkhorn_repeat": SINKHORN_REPEAT,
    }


def post_inputs(case: Case, m: int) -> dict:
    t = case.tokens
    return {
        "x": (_randn(case, 20, t, case.hidden)).to(torch.bfloat16),
        "residual": streams(case, 21, m),
        "post_layer_mix": torch.sigmoid(_randn(case, 23, t, m, 1)) * POST_MULT,
        "comb_res_mix": sinkhorn(_randn(case, 24, t, m, m), EPS, SINKHORN_REPEAT).float(),
    }


class MhcPreSpec(OpSpec):
    op = "mhc_pre"
    signature = contract("residual", "fn", "hc_scale", "hc_base", "rms_eps", "hc_pre_eps",
                         "hc_sinkhorn_eps", "hc_post_mult_value", "sinkhorn_repeat", n_splits=1)
    tolerances = mhc_tolerances.for_op("mhc_pre")
    case_params = CASE_PARAMS
    outputs = ("post_mix", "comb_mix", "layer_input")
    output_dtypes = {"post_mix": torch.float32, "comb_mix": torch.float32,
                     "layer_input": torch.bfloat16}
    guard_inputs = True
    token_args = ("residual",)

    def _make_inputs(self, case: Case) -> dict:
        m = self.param(case, "hc_mult")
        return {"residual": streams(case, 0, m), **pre_params(case, m)}

    def _reference(self, inputs: dict) -> dict:
        return dict(zip(self.outputs, mhc_pre_compute(*self.arguments(inputs), compute_dtype=F64,
                                                      round_output=False)))


class MhcPostSpec(OpSpec):
    op = "mhc_post"
    signature = contract("x", "residual", "post_layer_mix", "comb_res_mix")
    tolerances = mhc_tolerances.for_op("mhc_post")
    case_params = CASE_PARAMS
    outputs = ("out",)
    output_dtypes = {"out": torch.bfloat16}
    guard_inputs = True
    token_args = ("x", "residual", "post_layer_mix", "comb_res_mix")

    def _make_inputs(self, case: Case) -> dict:
        return post_inputs(case, self.param(case, "hc_mult"))

    def _reference(self, inputs: dict) -> dict:
        return {"out": mhc_post_compute(*self.arguments(inputs), compute_dtype=F64, round_output=False)}


class MhcFusedPostPreSpec(OpSpec):
    op = "mhc_fused_post_pre"
    signature = contract("x", "residual", "post_layer_mix", "comb_res_mix", "fn", "hc_scale",
                         "hc_base", "rms_eps", "hc_pre_eps", "hc_sinkhorn_eps",
                         "hc_post_mult_value", "sinkhorn_repeat", n_splits=1)
    tolerances = mhc_tolerances.for_op("mhc_fused_post_pre")
    case_params = CASE_PARAMS
    outputs = ("new_residual", "post_mix", "comb_mix", "layer_input")
    output_dtypes = {"new_residual": torch.bfloat16, **MhcPreSpec.output_dtypes}
    guard_inputs = True
    token_args = ("x", "residual", "post_layer_mix", "comb_res_mix")

    def _make_inputs(self, case: Case) -> dict:
        m = self.param(case, "hc_mult")
        return {**post_inputs(case, m), **pre_params(case, m)}

    def _reference(self, inputs: dict) -> dict:
        """The post output is stored in bf16 before the pre reads it (the contract's two ops)."""
        exact = mhc_post_compute(*[inputs[k] for k in self.token_args], compute_dtype=F64,
                                 round_output=False)
        return {"new_residual": exact, **self._pre_reference(inputs, exact.to(torch.bfloat16))}

    def _pre_reference(self, inputs: dict, stored_residual: torch.Tensor) -> dict:
        pre_args = [v for k, v in inputs.items() if k not in self.token_args]
        pre = mhc_pre_compute(stored_residual, *pre_args, compute_dtype=F64, round_output=False)
        return dict(zip(self.outputs[1:], pre))

    def refine_reference(self, inputs: dict, outputs: dict, ref: dict) -> dict:
        """Judge the pre half on the bf16 residual the implementation actually stored.

        Where the exact post output lies within fp32 error of a bf16 rounding boundary, fp32 and
        fp64 round it to neighbouring values, and one ulp of a residual element of magnitude
        16-32 moves ``layer_input`` by up to 0.12 (seen on the H100: 1-4 of 4.7e8 elements at
        T=32768-65536, H=7168, for both shipped kernels). ``new_residual`` itself is still judged
        against the exact post output, so a wrong residual cannot hide here.
        """
        stored = outputs.get("new_residual")
        if (stored is None or stored.dtype != torch.bfloat16
                or stored.shape != ref["new_residual"].shape):
            return ref
        refined = self.chunked_truth(
            stored.shape[0], lambda s, e: self._pre_reference(self.take_tokens(inputs, range(s, e)),
                                                              stored[s:e]), self.outputs[1:])
        return {"new_residual": ref["new_residual"], **refined}


class HcHeadSpec(OpSpec):
    op = "hc_head"
    signature = contract("hidden_states", "hc_fn", "hc_scale", "hc_base", "rms_eps", "hc_eps")
    tolerances = mhc_tolerances.for_op("hc_head")
    case_params = CASE_PARAMS
    outputs = ("out",)
    output_dtypes = {"out": torch.bfloat16}
    guard_inputs = True
    token_args = ("hidden_states",)

    def _make_inputs(self, case: Case) -> dict:
        m = self.param(case, "hc_mult")
        k = m * case.hidden
        return {
            "hidden_states": streams(case, 30, m),
            "hc_fn": _randn(case, 31, m, k) / math.sqrt(k),
            "hc_scale": 0.5 + torch.rand(1, generator=_rng(case, 32), device=case.device),
            "hc_base": 0.5 * _randn(case, 33, m),
            "rms_eps": EPS, "hc_eps": EPS,
        }

    def _reference(self, inputs: dict) -> dict:
        return {"out": hc_head_compute(*self.arguments(inputs), compute_dtype=F64, round_output=False)}


for _spec in (MhcPreSpec(), MhcPostSpec(), MhcFusedPostPreSpec(), HcHeadSpec()):
    register_spec(_spec)
