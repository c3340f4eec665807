"""Triton kernels of the mHC ops.

``mhc_pre`` / ``hc_head`` run in two kernels:

1. ``_rms_gemm_partial``: split-K GEMM of the flattened streams ``x [T, m*H]`` (bf16, read once)
   with ``fn^T`` at fp32 accuracy (``fn`` split into three bf16 parts, bf16 tensor cores, fp32
   accumulation), plus the partial sum of squares, into ``[n_splits, T, n_pad]`` partials.
2. ``_gates_and_mix``: one program per token (several, each a part of H, in small batches:
   ``_h_parts``) sums the partials in split order, applies the RMS scale, the gates and
   Sinkhorn, and writes the weighted sum of the streams.

The two kernels move 8.70 GB at T=65536, H=7168 for an ideal 4.70 GB (the streams read twice,
split-K partials written and read): they run at 95% of the copy bandwidth for the bytes they
move, 51-52% of the ideal. A one-pass design needs a token block's streams kept on chip across a
16-SM thread-block cluster, which Triton 3.6 does not expose; the designs measured instead (L2
handoff, token chunks sized for L2, slice groups, fused post+pre) and their figures are in
``docs/kernels/mhc.md``. ``mhc_fused_post_pre`` is ``mhc_post`` then ``mhc_pre``.

Batch invariance by construction: the split of K and the K tile come from the call's launch
plan (``LaunchPlan``) and the default ``n_splits`` depends on ``m*H`` only, so a token's arithmetic
is the same whatever else is in the batch. Two launch shapes do follow T, because neither changes
a row's arithmetic: the GEMM's token tile (``_gemm_block_t``: 64 rows while 128 would leave the
SMs short of programs) and the number of programs a token's weighted sum is spread over
(``_h_parts``: a decode batch would otherwise walk H with one program a token). Both shapes are
run against each other bitwise by the suites, and the batch-invariance detector compares T=1
with large batches. A different plan changes only the order of the GEMM's fp32 additions: the knob
``plan`` is swept by the config-invariance detector (PLANS).
"""

from __future__ import annotations

import dataclasses

import torch
import triton
import triton.language as tl

from harness.core.device import multiprocessors, triton_interpreted, triton_unavailable_reason
from harness.core.registry import register
from kernels.mhc import validate
from kernels.mhc.ops import FUSED_AS_COMPOSITION
from kernels.triton_utils import dot_bf16, to_bf16_rtne



@dataclasses.dataclass(frozen=True)
class LaunchPlan:
    """The launch constants of one call (the default was tuned on the H100 with
    ``benchmarks/tune_mhc_pre.py``). ``precision`` "bf16x3" keeps the GEMM fp32-accurate on bf16
    tensor cores; any other value is passed to ``tl.dot`` (the tuner's "tf32x3"). ``block_t`` is
    the GEMM's token tile where the grid fills the GPU (``_gemm_block_t``)."""
    block_t: int = 128
    block_k: int = 64
    gemm_warps: int = 4
    gemm_stages: int = 3
    precision: str = "bf16x3"
    split_k_size: int = 2048
    block_h: int = 1024
    epilogue_warps: int = 2
    post_warps: int = 4


DEFAULT_PLAN = LaunchPlan()
PLANS = (
    DEFAULT_PLAN,
    LaunchPlan(block_t=64, block_k=32, gemm_warps=8, gemm_stages=2, split_k_size=1024,
               block_h=256, epilogue_warps=4, post_warps=8),
)
"""The knob ``plan`` of the registered ops: smaller tiles, another split size and other warp
counts must give the default's results within tolerance."""
N_SPLITS_KNOB = (1, 2, 3, 8)

_REASON = triton_unavailable_reason()
_HERE = {"available": _REASON is None, "reason": _REASON or "", "triton": True}
"""How every kernel of this file registers: runnable where Triton is, launching Triton kernels."""


@triton.jit
def _rms_gemm_partial(x_ptr, fn_ptr, mix_ptr, sq_ptr, T, K, k_per_split,
                      N_MIX: tl.constexpr, N_PAD: tl.constexpr,
                      BLOCK_T: tl.constexpr, BLOCK_K: tl.constexpr, PRECISION: tl.constexpr,
                      INTERPRETED: tl.constexpr):
    """PRECISION "bf16x3": x stays bf16 (exact) and each fn tile is split into three bf16 parts
    (hi + mid + lo carry 24 mantissa bits), so three bf16 MMAs with fp32 accumulation give an
    fp32-accurate product at bf16 tensor-core speed. Otherwise PRECISION is passed to tl.dot
    ("tf32x3", "ieee", "tf32") with x converted to fp32."""
    pid_t = tl.program_id(0)
    pid_s = tl.program_id(1)
    rows = pid_t * BLOCK_T + tl.arange(0, BLOCK_T)
    cols = tl.arange(0, N_PAD)
    row_ok = rows < T
    col_ok = cols < N_MIX
    k_begin = pid_s * k_per_split
    k_end = tl.minimum(k_begin + k_per_split, K)
    acc = tl.zeros((BLOCK_T, N_PAD), dtype=tl.float32)
    sq = tl.zeros((BLOCK_T,), dtype=tl.float32)
    x_rows = x_ptr + rows.to(tl.int64)[:, None] * K
    for k0 in range(k_begin, k_end, BLOCK_K):
        ks = k0 + tl.arange(0, BLOCK_K)
        k_ok = ks < k_end
        x = tl.load(x_rows + ks[None, :], mask=row_ok[:, None] & k_ok[None, :], other=0.0)
        w = tl.load(fn_ptr + cols[None, :].to(tl.int64) * K + ks[:, None],
                    mask=k_ok[:, None] & col_ok[None, :], other=0.0)
        xf = x.to(tl.float32)
        sq += tl.sum(xf * xf, axis=1)
        if PRECISION == "bf16x3":
            w_hi = w.to(tl.bfloat16)
            rest = w - w_hi.to(tl.float32)
            w_mid = rest.to(tl.bfloat16)
            w_lo = (rest - w_mid.to(tl.float32)).to(tl.bfloat16)
            acc = dot_bf16(x, w_lo, acc, INTERPRETED)
            acc = dot_bf16(x, w_mid, acc, INTERPRETED)
            acc = dot_bf16(x, w_hi, acc, INTERPRETED)
        else:
            acc = tl.dot(xf, w, acc, input_precision=PRECISION)
    base = pid_s.to(tl.int64) * T
    tl.store(mix_ptr + (base + rows[:, None]) * N_PAD + cols[None, :], acc,
             mask=row_ok[:, None] & col_ok[None, :])
    tl.store(sq_ptr + base + rows, sq, mask=row_ok)


@triton.jit
def _gates_and_mix(mix_ptr, sq_ptr, res_ptr, scale_ptr, base_ptr, out_ptr, post_ptr, comb_ptr,
                   T, H, h_per_program, n_splits, rms_eps, pre_eps, sinkhorn_eps, post_mult,
                   sinkhorn_repeat, M: tl.constexpr, M_PAD: tl.constexpr, N_PAD: tl.constexpr,
                   HEAD: tl.constexpr, BLOCK_H: tl.constexpr):
    """HEAD=False: mhc_pre epilogue (pre, post, comb, layer_input); HEAD=True: hc_head.
    Program (t, p) writes ``layer_input[t, p*h_per_program:(p+1)*h_per_program]``; every
    program of a token computes its gates with the same instructions (the same bits), and the
    first one stores post and comb."""
    t = tl.program_id(0).to(tl.int64)
    part = tl.program_id(1)
    i = tl.arange(0, M_PAD)
    j = tl.arange(0, M_PAD)
    i_ok = i < M
    sq = tl.zeros((), dtype=tl.float32)
    pre_raw = tl.zeros((M_PAD,), dtype=tl.float32)
    post_raw = tl.zeros((M_PAD,), dtype=tl.float32)
    comb_raw = tl.zeros((M_PAD, M_PAD), dtype=tl.float32)
    ij_ok = i_ok[:, None] & (j < M)[None, :]
    for s in range(n_splits):
        row = mix_ptr + (s * T + t) * N_PAD
        sq += tl.load(sq_ptr + s * T + t)
        pre_raw += tl.load(row + i, mask=i_ok, other=0.0)
        if not HEAD:
            post_raw += tl.load(row + M + i, mask=i_ok, other=0.0)
            comb_raw += tl.load(row + 2 * M + i[:, None] * M + j[None, :], mask=ij_ok, other=0.0)
    rms = 1.0 / tl.sqrt(sq / (M * H) + rms_eps)
    pre = tl.sigmoid(pre_raw * rms * tl.load(scale_ptr) + tl.load(base_ptr + i, mask=i_ok)) + pre_eps
    pre = tl.where(i_ok, pre, 0.0)
    if not HEAD:
        post = tl.sigmoid(post_raw * rms * tl.load(scale_ptr + 1)
                          + tl.load(base_ptr + M + i, mask=i_ok)) * post_mult
        tl.store(post_ptr + t * M + i, post, mask=i_ok & (part == 0))
        logits = comb_raw * rms * tl.load(scale_ptr + 2) + tl.load(
            base_ptr + 2 * M + i[:, None] * M + j[None, :], mask=ij_ok, other=0.0)
        logits = tl.where(ij_ok, logits, float("-inf"))
        e = tl.exp(logits - tl.max(logits, axis=1)[:, None])
        e = tl.where(ij_ok, e, 0.0)
        c = tl.where(ij_ok, e / tl.sum(e, axis=1)[:, None] + sinkhorn_eps, 0.0)
        c = c / (tl.sum(c, axis=0)[None, :] + sinkhorn_eps)
        for _ in range(1, sinkhorn_repeat):
            c = c / (tl.sum(c, axis=1)[:, None] + sinkhorn_eps)
            c = c / (tl.sum(c, axis=0)[None, :] + sinkhorn_eps)
        tl.store(comb_ptr + t * M * M + i[:, None] * M + j[None, :], c, mask=ij_ok & (part == 0))
    hs = tl.arange(0, BLOCK_H)
    h_begin = part * h_per_program
    h_end = tl.minimum(h_begin + h_per_program, H)
    for h0 in range(h_begin, h_end, BLOCK_H):
        h_ok = h0 + hs < h_end
        r = tl.load(res_ptr + t * M * H + i[:, None] * H + h0 + hs[None, :],
                    mask=i_ok[:, None] & h_ok[None, :], other=0.0).to(tl.float32)
        mixed = tl.sum(pre[:, None] * r, axis=0)
        tl.store(out_ptr + t * H + h0 + hs, to_bf16_rtne(mixed), mask=h_ok)


@triton.jit
def _post_mix(x_ptr, res_ptr, post_ptr, comb_ptr, out_ptr, H,
              M: tl.constexpr, BLOCK_H: tl.constexpr):
    t = tl.program_id(0).to(tl.int64)
    hs = tl.program_id(1) * BLOCK_H + tl.arange(0, BLOCK_H)
    h_ok = hs < H
    x = tl.load(x_ptr + t * H + hs, mask=h_ok, other=0.0).to(tl.float32)
    for jj in tl.static_range(M):
        acc = tl.load(post_ptr + t * M + jj) * x
        for ii in tl.static_range(M):
            r = tl.load(res_ptr + (t * M + ii) * H + hs, mask=h_ok, other=0.0).to(tl.float32)
            acc += tl.load(comb_ptr + (t * M + ii) * M + jj) * r
        tl.store(out_ptr + (t * M + jj) * H + hs, to_bf16_rtne(acc), mask=h_ok)


SMALL_BLOCK_T = 64
"""The GEMM's token tile while the plan's tile would leave the GPU short of programs: the
smallest that keeps the tensor-core instruction (a 64-row wgmma on Hopper) and so a row's bits."""
PROGRAMS_PER_SM = 8


def _gemm_block_t(tokens: int, n_splits: int, plan: LaunchPlan, device: torch.device) -> int:
    """The GEMM's token tile for a call: ``SMALL_BLOCK_T`` while the plan's tile would give fewer
    than ``PROGRAMS_PER_SM`` programs an SM, else the plan's. A tile only groups rows: each row is
    multiplied by the same instructions in the same K order, so its bits do not depend on the
    tile (bitwise on the H100 for 64 and 128 rows at T=1 to 65536). On the H100 (2026-11-25,
    H=7168) the small tile took mhc_pre from 43.8 to 38.4 us at T=1, 55.5 to 40.8 at T=64,
    272.9 to 244.6 at T=4096; from T=12288 the plan's 128 rows were faster."""
    if plan.block_t <= SMALL_BLOCK_T:
        return plan.block_t
    programs = triton.cdiv(tokens, plan.block_t) * n_splits
    return SMALL_BLOCK_T if programs < PROGRAMS_PER_SM * (multiprocessors(device) or 1) else plan.block_t


def _n_pad(n: int) -> int:
    return max(16, triton.next_power_of_2(n))


def _rms_gemm(x: torch.Tensor, fn: torch.Tensor, n_splits: int | None,
              plan: LaunchPlan = DEFAULT_PLAN):
    t, k = x.shape
    n_mix = fn.shape[0]
    if n_splits is None:
        n_splits = triton.cdiv(k, plan.split_k_size)
    if int(n_splits) < 1:
        raise validate.ContractError(f"n_splits must be >= 1, got {n_splits}")
    k_per_split = triton.cdiv(triton.cdiv(k, int(n_splits)), plan.block_k) * plan.block_k
    n_splits = triton.cdiv(k, k_per_split)
    n_pad = _n_pad(n_mix)
    mix = torch.empty((n_splits, t, n_pad), dtype=torch.float32, device=x.device)
    sq = torch.empty((n_splits, t), dtype=torch.float32, device=x.device)
    block_t = _gemm_block_t(t, n_splits, plan, x.device)
    _rms_gemm_partial[(triton.cdiv(t, block_t), n_splits)](
        x, fn.contiguous(), mix, sq, t, k, k_per_split, N_MIX=n_mix, N_PAD=n_pad,
        BLOCK_T=block_t, BLOCK_K=plan.block_k, PRECISION=plan.precision,
        INTERPRETED=triton_interpreted(), num_warps=plan.gemm_warps, num_stages=plan.gemm_stages)
    return mix, sq, n_splits, n_pad


def _block_h(h: int, plan: LaunchPlan) -> int:
    return min(plan.block_h, triton.next_power_of_2(h))


def _h_parts(tokens: int, h_blocks: int, device: torch.device) -> int:
    """Programs per token of ``_gates_and_mix``: one while the tokens alone give two programs an
    SM, else as many (up to one per ``block_h`` chunk of H) as it takes. Each element of
    ``layer_input`` is computed by the same instructions whichever program computes it. On the
    H100 (2026-11-25, T=1, H=7168) the kernel took 6.2 us instead of 12.1 for mhc_pre, 3.9
    instead of 9.9 for hc_head."""
    wanted = 2 * (multiprocessors(device) or 1)
    return max(1, min(h_blocks, -(-wanted // max(tokens, 1))))


def _gates(mix, sq, splits, n_pad, streams, hc_scale, hc_base, out, post, comb, eps: tuple,
           hc_post_mult_value, sinkhorn_repeat, head: bool, plan: LaunchPlan) -> None:
    """The second kernel: per token, the mixes from the GEMM partials, the gates (and Sinkhorn
    for mhc_pre) and the weighted sum of the streams into ``out``."""
    t, m, h = streams.shape
    block_h = _block_h(h, plan)
    parts = _h_parts(t, triton.cdiv(h, block_h), streams.device)
    h_per_program = triton.cdiv(triton.cdiv(h, block_h), parts) * block_h
    _gates_and_mix[(t, triton.cdiv(h, h_per_program))](
        mix, sq, streams, hc_scale, hc_base, out, post, comb, t, h, h_per_program, splits,
        *map(float, eps),
        float(hc_post_mult_value), int(sinkhorn_repeat), M=m, M_PAD=triton.next_power_of_2(m),
        N_PAD=n_pad, HEAD=head, BLOCK_H=block_h, num_warps=plan.epilogue_warps)


KNOBS = {"n_splits": N_SPLITS_KNOB, "plan": PLANS}


@register("mhc_pre", "triton", **_HERE, batch_invariant=True, knobs=KNOBS)
def mhc_pre(residual, fn, hc_scale, hc_base, rms_eps, hc_pre_eps, hc_sinkhorn_eps,
            hc_post_mult_value, sinkhorn_repeat, n_splits=None, plan: LaunchPlan = DEFAULT_PLAN):
    m, h = validate.check_pre(residual, fn, hc_scale, hc_base, sinkhorn_repeat)
    lead = residual.shape[:-2]
    res = residual.reshape(-1, m, h).contiguous()
    t = res.shape[0]
    post = torch.empty((t, m, 1), dtype=torch.float32, device=res.device)
    comb = torch.empty((t, m, m), dtype=torch.float32, device=res.device)
    layer_input = torch.empty((t, h), dtype=residual.dtype, device=res.device)
    if t:
        mix, sq, splits, n_pad = _rms_gemm(res.view(t, m * h), fn, n_splits, plan)
        _gates(mix, sq, splits, n_pad, res, hc_scale.contiguous(), hc_base.contiguous(),
               layer_input, post, comb, (rms_eps, hc_pre_eps, hc_sinkhorn_eps),
               hc_post_mult_value, sinkhorn_repeat, head=False, plan=plan)
    return post.view(*lead, m, 1), comb.view(*lead, m, m), layer_input.view(*lead, h)


@register("mhc_post", "triton", **_HERE, batch_invariant=True, knobs={"plan": PLANS})
def mhc_post(x, residual, post_layer_mix, comb_res_mix, plan: LaunchPlan = DEFAULT_PLAN):
    m, h = validate.check_post(x, residual, post_layer_mix, comb_res_mix)
    res = residual.reshape(-1, m, h).contiguous()
    t = res.shape[0]
    out = torch.empty_like(res)
    if t:
        block_h = _block_h(h, plan)
        _post_mix[(t, triton.cdiv(h, block_h))](
            x.reshape(t, h).contiguous(), res, post_layer_mix.reshape(t, m).contiguous(),
            comb_res_mix.reshape(t, m, m).contiguous(), out, h, M=m, BLOCK_H=block_h,
            num_warps=plan.post_warps)
    return out.view(residual.shape)


@register("mhc_fused_post_pre", "triton", **_HERE, batch_invariant=True, knobs=KNOBS,
          declared=FUSED_AS_COMPOSITION)
def mhc_fused_post_pre(x, residual, post_layer_mix, comb_res_mix, fn, hc_scale, hc_base, rms_eps,
                       hc_pre_eps, hc_sinkhorn_eps, hc_post_mult_value, sinkhorn_repeat,
                       n_splits=None, plan: LaunchPlan = DEFAULT_PLAN):
    new_residual = mhc_post(x, residual, post_layer_mix, comb_res_mix, plan=plan)
    return (new_residual, *mhc_pre(new_residual, fn, hc_scale, hc_base, rms_eps, hc_pre_eps,
                                   hc_sinkhorn_eps, hc_post_mult_value, sinkhorn_repeat,
                                   n_splits, plan=plan))


@register("hc_head", "triton", **_HERE, batch_invariant=True, knobs=KNOBS)
def hc_head(hidden_states, hc_fn, hc_scale, hc_base, rms_eps, hc_eps, n_splits=None,
            plan: LaunchPlan = DEFAULT_PLAN):
    m, h = validate.check_head(hidden_states, hc_fn, hc_scale, hc_base)
    lead = hidden_states.shape[:-2]
    hs = hidden_states.reshape(-1, m, h).contiguous()
    t = hs.shape[0]
    out = torch.empty((t, h), dtype=hidden_states.dtype, device=hs.device)
    if t:
        mix, sq, splits, n_pad = _rms_gemm(hs.view(t, m * h), hc_fn, n_splits, plan)
        _gates(mix, sq, splits, n_pad, hs, hc_scale.reshape(1).contiguous(), hc_base.contiguous(),
               out, out, out, (rms_eps, hc_eps, 0.0), 0.0, 0, head=True, plan=plan)
    return out.view(*lead, h)
