"""Seeded faults of the mHC family, each modelled on a real way such kernels break."""

from __future__ import annotations

import torch

from harness.faults import fault
from harness.registry import Implementation
from kernels.mhc import torch as ref


def _impl(op: str, name: str, fn, **kw) -> Implementation:
    return Implementation(op=op, name=name, fn=fn, source=__name__, **kw)


@fault("gemm_fp16_above_T", "mhc_pre", "large-token precision", "precision_growth")
def gemm_fp16_above_t(threshold: int) -> Implementation:
    """Like a kernel whose large-T path loads ``fn`` as fp16 for the tensor cores: inside the
    absolute tolerance, but its per-token error jumps above ``threshold`` tokens."""
    def mhc_pre(residual, fn, *args, n_splits=1):
        if residual.reshape(-1, *residual.shape[-2:]).shape[0] > threshold:
            fn = fn.half().float()
        return ref.mhc_pre(residual, fn, *args)
    return _impl("mhc_pre", "fault-gemm-fp16-above-T", mhc_pre)


@fault("reduction_order_depends_on_T", "mhc_pre", "batch dependence", "batch_invariance")
def reduction_order_depends_on_t(threshold: int) -> Implementation:
    """Claims bitwise batch invariance but picks its split-K from T (a heuristic that changes
    the summation order, so a token's bits change with the batch it is in)."""
    def mhc_pre(residual, fn, hc_scale, hc_base, rms_eps, hc_pre_eps, hc_sinkhorn_eps,
                hc_post_mult_value, sinkhorn_repeat, n_splits=1):
        m, h = residual.shape[-2:]
        x = residual.reshape(-1, m * h).float()
        splits = 1 if x.shape[0] <= 1 else 8
        mixes = sum(xc @ fc.t() for xc, fc in zip(x.chunk(splits, dim=1), fn.chunk(splits, dim=1)))
        mixes = mixes * torch.rsqrt(x.square().mean(-1, keepdim=True) + rms_eps)
        pre, post, comb = ref.pre_gates(mixes, hc_scale, hc_base, m, hc_pre_eps, hc_sinkhorn_eps,
                                        hc_post_mult_value, sinkhorn_repeat)
        li = (pre.unsqueeze(-1) * x.view(-1, m, h)).sum(1).to(residual.dtype)
        return post, comb, li
    return _impl("mhc_pre", "fault-reduction-order-depends-on-T", mhc_pre, batch_invariant=True)


@fault("reads_neighbour_row", "mhc_post", "batch dependence", "batch_invariance")
def reads_neighbour_row(threshold: int) -> Implementation:
    """An off-by-one row index: each token's output leaks a little of the next token's residual
    (wraps to itself for the last), so it depends on who its neighbours are."""
    def mhc_post(x, residual, post_layer_mix, comb_res_mix):
        out = ref.mhc_post_compute(x, residual, post_layer_mix, comb_res_mix, round_output=False)
        neighbour = torch.roll(residual.float(), shifts=-1, dims=0)
        return (out + 0.05 * neighbour).to(residual.dtype)
    return _impl("mhc_post", "fault-reads-neighbour-row", mhc_post)


@fault("unwritten_tail_tile", "mhc_post", "out-of-bounds / unwritten output", "poisoned_outputs")
def unwritten_tail_tile(threshold: int) -> Implementation:
    """Launches T // 16 tiles of 16 tokens and forgets the remainder: the last T % 16 rows of
    the output are whatever the allocator left there."""
    def mhc_post(x, residual, post_layer_mix, comb_res_mix):
        out = torch.empty_like(residual)
        full = (residual.shape[0] // 16) * 16
        out[:full] = ref.mhc_post(x[:full], residual[:full], post_layer_mix[:full],
                                  comb_res_mix[:full])
        return out
    return _impl("mhc_post", "fault-unwritten-tail-tile", mhc_post)


@fault("split_k_drops_last_split", "hc_head", "config dependence", "config_invariance")
def split_k_drops_last_split(threshold: int) -> Implementation:
    """With n_splits > 1 the last K-split's partial is never added (a loop bound off by one)."""
    def hc_head(hidden_states, hc_fn, hc_scale, hc_base, rms_eps, hc_eps, n_splits=1):
        if n_splits > 1:
            m, h = hidden_states.shape[-2:]
            keep = (m * h) - (m * h) // n_splits
            hc_fn = hc_fn.clone()
            hc_fn[:, keep:] = 0
        return ref.hc_head(hidden_states, hc_fn, hc_scale, hc_base, rms_eps, hc_eps)
    return _impl("hc_head", "fault-split-k-drops-last-split", hc_head, knobs={"n_splits": (1, 4)})


@fault("post_writes_residual", "mhc_post", "inputs clobbered", "inputs_unchanged")
def post_writes_residual(threshold: int) -> Implementation:
    """Right output, but the residual stream it was given is overwritten in place (a kernel
    that reuses its input buffer as scratch): the next layer reads garbage."""
    def mhc_post(x, residual, post_layer_mix, comb_res_mix):
        out = ref.mhc_post(x, residual, post_layer_mix, comb_res_mix)
        residual[-1].zero_()
        return out
    return _impl("mhc_post", "fault-post-writes-residual", mhc_post)
