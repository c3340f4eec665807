"""Triton kernels of the mHC ops.

``mhc_pre`` / ``hc_head`` run in two kernels:

1. ``_rms_gemm_partial``: split-K GEMM of the flattened streams ``x [T, m*H]`` (bf16, read once)
   with ``fn^T`` at fp32 accuracy (``fn`` split into three bf16 parts, bf16 tensor cores, fp32
   accumulation), plus the partial sum of squares, into split-K partials (``_GemmLaunch``). A
   split is summed chunk by chunk (``chunk_k``), each chunk from zero: a decode batch then runs a
   program per chunk (``_chunk_programs``), with a walk of 4 K tiles instead of 32, and leaves
   each chunk's sum for the next kernel to add in chunk order: the same bits as a large batch's
   program per split.
2. ``_gates_and_mix``: one program per token (several, each a part of H, in small batches:
   ``_h_parts``) sums the partials in split order, applies the RMS scale, the gates and
   Sinkhorn, and writes the weighted sum of the streams.

The two kernels move nearly twice the ideal bytes (the streams read twice, split-K partials
written and read), near the copy bandwidth for the bytes they move. A one-pass design needs a
token block's streams kept on chip across a 16-SM thread-block cluster, which Triton 3.6 does not
expose; the designs measured instead (L2 handoff, token chunks sized for L2, slice groups, fused
post+pre) and the figures are in ``docs/kernels/mhc.md``. ``mhc_fused_post_pre`` is
``mhc_post`` then ``mhc_pre``.

Batch invariance by construction: the split of K and the K tile come from the call's launch
plan (``LaunchPlan``) and the default ``n_splits`` depends on ``m*H`` only, so a token's arithmetic
is the same whatever else is in the batch. Four launch shapes do follow T, because none changes
a row's arithmetic: the GEMM's token tile (``_gemm_block_t``: 64 rows while 128 would leave the
SMs short of programs), a program per K chunk or per split (``_chunk_programs``), the gates
kernel's H tile (``_gates_block_h``) and the number of programs a token's weighted sum is spread
over (``_h_parts``: a decode batch would otherwise walk H with one program a token). Every
combination is run against the others bitwise by the suites, and the batch-invariance detector
compares T=1 with large batches. A different plan changes only the order of the GEMM's fp32 additions: the knob
``plan`` is swept by the config-invariance detector (PLANS).
"""

from __future__ import annotations

import dataclasses
import functools

import torch
import triton
import triton.language as tl

from kernels.runtime.device import multiprocessors, triton_interpreted, triton_unavailable_reason
from kernels.runtime.memo import per_signature
from harness.core.registry import register
from kernels.mhc import validate
from kernels.mhc.ops import FUSED_AS_COMPOSITION
from kernels.runtime.triton_utils import (Launch, cdiv, dependent_launch, dot_bf16, next_power_of_2,
                                  release_next_kernel, to_bf16_rtne, wait_for_previous_kernel)



@dataclasses.dataclass(frozen=True)
class LaunchPlan:
    """The launch constants of one call (the default was tuned on the H100 with
    ``benchmarks/tune_mhc_pre.py``). ``precision`` "bf16x3" keeps the GEMM fp32-accurate on bf16
    tensor cores; any other value is passed to ``tl.dot`` (the tuner's "tf32x3"). ``block_t`` is
    the GEMM's token tile where the grid fills the GPU (``_gemm_block_t``). The gates kernel
    runs on ``epilogue_warps`` for mhc_pre (one warp: Sinkhorn's reductions need no shared
    memory) and ``head_epilogue_warps`` for hc_head, which has no Sinkhorn and whose weighted
    sum gains from more loads in flight (docs/kernels/mhc.md, "hc_head's gates kernel on four
    warps")."""
    block_t: int = 128
    block_k: int = 64
    gemm_warps: int = 4
    gemm_stages: int = 3
    precision: str = "bf16x3"
    split_k_size: int = 2048
    chunk_k: int = 256
    block_h: int = 1024
    epilogue_warps: int = 1
    head_epilogue_warps: int = 4
    post_warps: int = 4


DEFAULT_PLAN = LaunchPlan()
PLANS = (
    DEFAULT_PLAN,
    LaunchPlan(block_t=64, block_k=32, gemm_warps=8, gemm_stages=2, split_k_size=1024,
               block_h=256, epilogue_warps=4, head_epilogue_warps=1, post_warps=8),
)
"""The knob ``plan`` of the registered ops: smaller tiles, another split size and other warp
counts must give the default's results within tolerance."""
N_SPLITS_KNOB = (1, 2, 3, 8)

_INTERPRETED = triton_interpreted()
"""Fixed when this module is imported, as Triton's own choice between compiling and interpreting
is (harness.core.device.configure_triton runs first); read per call it cost the host a lookup."""
_REASON = triton_unavailable_reason()
_HERE = {"available": _REASON is None, "reason": _REASON or "", "triton": True}
"""How every kernel of this file registers: runnable where Triton is, launching Triton kernels."""


@triton.jit
def _partial_row(token, partial, T, n_partials, TOKEN_MAJOR: tl.constexpr):
    """The scratch row of a token's partial (``_GemmLaunch``), for the GEMM that stores it and
    the gates kernel that loads it: a token's ``n_partials`` side by side (TOKEN_MAJOR: decode
    batches, one partial a chunk), else a partial's T tokens. In int64: 2^31 at 67M tokens."""
    if TOKEN_MAJOR:
        return token.to(tl.int64) * n_partials + partial
    else:
        return partial.to(tl.int64) * T + token


@triton.jit(do_not_specialize=["sq_at"])
def _rms_gemm_partial(x_ptr, fn_ptr, mix_ptr, sq_at, T, K, k_per_split, chunk_k, chunks_per_program,
                      N_MIX: tl.constexpr, N_PAD: tl.constexpr, BLOCK_T: tl.constexpr,
                      BLOCK_K: tl.constexpr, CHUNK_PROGRAMS: tl.constexpr,
                      PRECISION: tl.constexpr, INTERPRETED: tl.constexpr, PDL: tl.constexpr,
                      NEXT_EARLY: tl.constexpr):
    """PRECISION "bf16x3": x stays bf16 (exact) and each fn tile is split into three bf16 parts
    (hi + mid + lo carry 24 mantissa bits), so three bf16 MMAs with fp32 accumulation give an
    fp32-accurate product at bf16 tensor-core speed. Otherwise PRECISION is passed to tl.dot
    ("tf32x3", "ieee", "tf32") with x converted to fp32.

    Program (t, w) sums ``chunks_per_program`` consecutive chunks of a split, each accumulated
    from zero, in chunk order (one loop over the K tiles, so that its loads stay pipelined), and
    stores the sum as partial ``w`` of its rows (``_GemmLaunch`` gives the layout): with
    CHUNK_PROGRAMS == 1 the split's partial, else (``_chunk_programs``: decode batches) one
    chunk's, which ``_gates_and_mix`` adds from zero in chunk order: the same additions, the
    same bits.
    ``mix_ptr`` is one scratch buffer; the sums of squares lie from offset ``sq_at`` in it."""
    wait_for_previous_kernel(PDL, NEXT_EARLY)
    sq_ptr = mix_ptr + sq_at
    pid_t = tl.program_id(0)
    pid_w = tl.program_id(1)
    rows = pid_t * BLOCK_T + tl.arange(0, BLOCK_T)
    cols = tl.arange(0, N_PAD)
    row_ok = rows < T
    col_ok = cols < N_MIX
    split_begin = (pid_w // CHUNK_PROGRAMS) * k_per_split
    split_end = tl.minimum(split_begin + k_per_split, K)
    begin = split_begin + (pid_w % CHUNK_PROGRAMS) * chunks_per_program * chunk_k
    end = tl.minimum(begin + chunks_per_program * chunk_k, split_end)
    part = tl.zeros((BLOCK_T, N_PAD), dtype=tl.float32)
    part_sq = tl.zeros((BLOCK_T,), dtype=tl.float32)
    acc = tl.zeros((BLOCK_T, N_PAD), dtype=tl.float32)
    sq = tl.zeros((BLOCK_T,), dtype=tl.float32)
    x_rows = x_ptr + rows.to(tl.int64)[:, None] * K
    for k0 in range(begin, end, BLOCK_K):
        ks = k0 + tl.arange(0, BLOCK_K)
        k_ok = ks < end
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
        chunk_done = ((k0 - split_begin) % chunk_k == chunk_k - BLOCK_K) | (k0 + BLOCK_K >= end)
        if chunk_done:
            part += acc
            part_sq += sq
            acc = tl.zeros((BLOCK_T, N_PAD), dtype=tl.float32)
            sq = tl.zeros((BLOCK_T,), dtype=tl.float32)
    mine = _partial_row(rows, pid_w, T, tl.num_programs(1), CHUNK_PROGRAMS > 1)
    tl.store(mix_ptr + mine[:, None] * N_PAD + cols[None, :], part,
             mask=row_ok[:, None] & col_ok[None, :])
    tl.store(sq_ptr + mine, part_sq, mask=row_ok)
    release_next_kernel(PDL, NEXT_EARLY)


@triton.jit
def _split_sums(ptr, chunk_stride, mask, CHUNKS: tl.constexpr):
    """Each split's partial from the GEMM's scratch (``ptr``: chunk 0's; chunk c's lie
    ``c * chunk_stride`` after): loaded as is, or with CHUNKS > 1 its chunks' sums added from
    zero in chunk order, as a program a split adds them in registers."""
    total = tl.load(ptr, mask=mask, other=0.0)
    if CHUNKS > 1:
        total = 0.0 + total
        for c in tl.static_range(1, CHUNKS):
            total += tl.load(ptr + c * chunk_stride, mask=mask, other=0.0)
    return total


@triton.jit(do_not_specialize=["sq_at"])
def _gates_and_mix(mix_ptr, res_ptr, scale_ptr, base_ptr, out_ptr, post_ptr, comb_ptr, sq_at,
                   T, H, h_per_program, n_splits, gates_part, rms_eps, pre_eps, sinkhorn_eps, post_mult,
                   sinkhorn_repeat, SPLITS_PAD: tl.constexpr, CHUNKS: tl.constexpr,
                   M: tl.constexpr, M_PAD: tl.constexpr, N_PAD: tl.constexpr,
                   HEAD: tl.constexpr, BLOCK_H: tl.constexpr, PDL: tl.constexpr,
                   NEXT_EARLY: tl.constexpr):
    """HEAD=False: mhc_pre epilogue (pre, post, comb, layer_input); HEAD=True: hc_head.
    Program (t, p) writes ``layer_input[t, p*h_per_program:(p+1)*h_per_program]`` with the
    pre gates, which every such program of a token computes with the same instructions (the
    same bits). For mhc_pre, program ``gates_part`` of a token also computes post and comb
    (Sinkhorn): the first, or in a decode batch one more program after the others, which does
    nothing else, so that the gates' dependent chain runs beside the weighted sum instead of
    before it (``_gates_launch``). The splits' partials are loaded at once (with CHUNKS > 1,
    each the sum of its chunks': ``_split_sums``) and summed with ``tl.sum``: one order for
    every T."""
    wait_for_previous_kernel(PDL, NEXT_EARLY)
    sq_ptr = mix_ptr + sq_at
    t = tl.program_id(0).to(tl.int64)
    part = tl.program_id(1)
    i = tl.arange(0, M_PAD)
    j = tl.arange(0, M_PAD)
    i_ok = i < M
    hs = tl.arange(0, BLOCK_H)
    h_begin = part * h_per_program  # an extra gates program's lies past H: it mixes nothing
    h_end = tl.minimum(h_begin + h_per_program, H)
    streams = res_ptr + t * M * H + i[:, None] * H
    ahead = tl.load(streams + h_begin + hs[None, :],  # in flight while the gates are computed
                    mask=i_ok[:, None] & (h_begin + hs < h_end)[None, :], other=0.0)
    ij_ok = i_ok[:, None] & (j < M)[None, :]
    ss = tl.arange(0, SPLITS_PAD)
    s_ok = ss < n_splits
    first = _partial_row(t, ss * CHUNKS, T, n_splits * CHUNKS, CHUNKS > 1)
    rows = mix_ptr + first * N_PAD
    sq = tl.sum(_split_sums(sq_ptr + first, 1, s_ok, CHUNKS), axis=0)
    pre_raw = tl.sum(_split_sums(rows[:, None] + i[None, :], N_PAD,
                                 s_ok[:, None] & i_ok[None, :], CHUNKS), axis=0)
    rms = 1.0 / tl.sqrt(sq / (M * H) + rms_eps)
    pre = tl.sigmoid(pre_raw * rms * tl.load(scale_ptr) + tl.load(base_ptr + i, mask=i_ok)) + pre_eps
    pre = tl.where(i_ok, pre, 0.0)
    if not HEAD:
        if part == gates_part:
            post_raw = tl.sum(_split_sums(rows[:, None] + M + i[None, :], N_PAD,
                                          s_ok[:, None] & i_ok[None, :], CHUNKS), axis=0)
            comb_raw = tl.sum(_split_sums(rows[:, None, None] + 2 * M + (i[:, None] * M + j[None, :])[None],
                                          N_PAD, s_ok[:, None, None] & ij_ok[None], CHUNKS),
                              axis=0)
            post = tl.sigmoid(post_raw * rms * tl.load(scale_ptr + 1)
                              + tl.load(base_ptr + M + i, mask=i_ok)) * post_mult
            tl.store(post_ptr + t * M + i, post, mask=i_ok)
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
            tl.store(comb_ptr + t * M * M + i[:, None] * M + j[None, :], c, mask=ij_ok)
    for h0 in range(h_begin, h_end, BLOCK_H):
        r = ahead
        h_ok = h0 + hs < h_end
        ahead = tl.load(streams + h0 + BLOCK_H + hs[None, :],
                        mask=i_ok[:, None] & (h0 + BLOCK_H + hs < h_end)[None, :], other=0.0)
        mixed = tl.sum(pre[:, None] * r.to(tl.float32), axis=0)
        tl.store(out_ptr + t * H + h0 + hs, to_bf16_rtne(mixed), mask=h_ok)
    release_next_kernel(PDL, NEXT_EARLY)


@triton.jit
def _post_mix(x_ptr, res_ptr, post_ptr, comb_ptr, out_ptr, H,
              M: tl.constexpr, M_PAD: tl.constexpr, BLOCK_H: tl.constexpr, PDL: tl.constexpr,
              NEXT_EARLY: tl.constexpr):
    """All M output streams of a block of H at once, as one tile: every load is issued before
    the one store (stores between them could alias the streams, which kept each output's loads
    waiting on the previous output's store). Each element is still ``post * x`` plus the
    streams' terms in stream order: the same operations, the same bits."""
    wait_for_previous_kernel(PDL, NEXT_EARLY)
    t = tl.program_id(0).to(tl.int64)
    hs = tl.program_id(1) * BLOCK_H + tl.arange(0, BLOCK_H)
    h_ok = hs < H
    jj = tl.arange(0, M_PAD)
    jj_ok = jj < M
    x = tl.load(x_ptr + t * H + hs, mask=h_ok, other=0.0).to(tl.float32)
    acc = tl.load(post_ptr + t * M + jj, mask=jj_ok, other=0.0)[:, None] * x[None, :]
    for ii in tl.static_range(M):
        r = tl.load(res_ptr + (t * M + ii) * H + hs, mask=h_ok, other=0.0).to(tl.float32)
        acc += tl.load(comb_ptr + (t * M + ii) * M + jj, mask=jj_ok, other=0.0)[:, None] * r[None, :]
    tl.store(out_ptr + (t * M + jj)[:, None] * H + hs[None, :], to_bf16_rtne(acc),
             mask=jj_ok[:, None] & h_ok[None, :])
    release_next_kernel(PDL, NEXT_EARLY)


def _next_early(tokens: int, head: bool) -> bool:
    """Whether the GEMM and the gates kernel release the next kernel at their start (PDL) rather
    than at their end: where that is faster per call in a captured step, hc_head up to T=256 and
    mhc_pre up to T=16 and from T=48 to 192. Elsewhere the next kernel's programs, placed beside
    this kernel's while it runs, slow both (docs/kernels/mhc.md, "Dependent launches" and "Early
    release by op and T")."""
    if head:
        return tokens <= 256
    return tokens <= 16 or 48 <= tokens <= 192


SMALL_BLOCK_T = 64
"""The GEMM's token tile while the plan's tile would leave the GPU short of programs: the
smallest that keeps the tensor-core instruction (a 64-row wgmma on Hopper) and so a row's bits."""
PROGRAMS_PER_SM = 8


def _gemm_block_t(tokens: int, n_splits: int, plan: LaunchPlan, device: torch.device) -> int:
    """The GEMM's token tile for a call: ``SMALL_BLOCK_T`` while the plan's tile would give fewer
    than ``PROGRAMS_PER_SM`` programs an SM, else the plan's. A tile only groups rows: each row is
    multiplied by the same instructions in the same K order, so its bits do not depend on the
    tile (the suites force both tiles and compare bitwise). The small tile makes decode and
    mid-size batches faster; large batches, with programs enough, are faster on the plan's tile
    (docs/kernels/mhc.md has the measurements)."""
    if plan.block_t <= SMALL_BLOCK_T:
        return plan.block_t
    programs = cdiv(tokens, plan.block_t) * n_splits
    return SMALL_BLOCK_T if programs < PROGRAMS_PER_SM * (multiprocessors(device) or 1) else plan.block_t


def _n_pad(n: int) -> int:
    return max(16, next_power_of_2(n))


def _chunk_programs(programs: int, chunks: int, device: torch.device) -> int:
    """Programs per K split of the GEMM: one a chunk while one a split (and token tile) would
    leave SMs idle (a decode batch: more, shorter programs), else one. A split's partial is the
    same sum of the same chunk sums either way (``_rms_gemm_partial``); the suites force each
    and compare bitwise."""
    return chunks if programs < (multiprocessors(device) or 1) else 1


@dataclasses.dataclass(frozen=True, eq=False)
class _GemmLaunch:
    """``_rms_gemm_partial``'s launch and its scratch, one buffer addressed by offsets instead of
    tensor views, which cost the host microseconds each: ``mix [n_splits, T, n_pad]`` and, from
    offset ``sq_at``, ``sq [n_splits, T]``; in a decode batch (``chunks`` partials a split, one a
    chunk) ``mix [T, n_splits, chunks, n_pad]`` and ``sq [T, n_splits, chunks]``, a token's
    partials side by side for the gates kernel to load (faster there, slower for large batches:
    docs/kernels/mhc.md)."""
    launch: Launch
    scratch_numel: int
    sq_at: int
    n_splits: int
    chunks: int
    n_pad: int

    def __call__(self, x: torch.Tensor, fn: torch.Tensor) -> torch.Tensor:
        scratch = torch.empty(self.scratch_numel, dtype=torch.float32, device=x.device)
        self.launch(x, fn, scratch)
        return scratch


@functools.lru_cache(maxsize=1024)
def _gemm_launch(t: int, k: int, n_mix: int, n_splits: int | None, head: bool, plan: LaunchPlan,
                 device: torch.device) -> _GemmLaunch:
    """The GEMM's launch geometry and scratch layout, once per shape and plan."""
    if n_splits is None:
        n_splits = cdiv(k, plan.split_k_size)
    k_per_split = cdiv(cdiv(k, n_splits), plan.block_k) * plan.block_k
    n_splits = cdiv(k, k_per_split)
    chunk_k = min(k_per_split, cdiv(plan.chunk_k, plan.block_k) * plan.block_k)
    chunks = cdiv(k_per_split, chunk_k)
    block_t = _gemm_block_t(t, n_splits, plan, device)
    t_blocks = cdiv(t, block_t)
    programs = _chunk_programs(t_blocks * n_splits, chunks, device)
    n_pad = _n_pad(n_mix)
    rows = n_splits * programs * t
    launch = Launch(
        _rms_gemm_partial, (t_blocks, n_splits * programs),
        (rows * n_pad, t, k, k_per_split, chunk_k, chunks // programs),
        dict(N_MIX=n_mix, N_PAD=n_pad, BLOCK_T=block_t, BLOCK_K=plan.block_k,
             CHUNK_PROGRAMS=programs, PRECISION=plan.precision, INTERPRETED=_INTERPRETED,
             num_warps=plan.gemm_warps, num_stages=plan.gemm_stages,
             **dependent_launch(device, _next_early(t, head))))
    return _GemmLaunch(launch, rows * (n_pad + 1), rows * n_pad, n_splits, programs, n_pad)


def _rms_gemm(x: torch.Tensor, fn: torch.Tensor, n_splits: int | None,
              plan: LaunchPlan = DEFAULT_PLAN, head: bool = False) -> tuple[torch.Tensor, _GemmLaunch]:
    """The first kernel on ``x [T, K]`` (of mhc_pre, or with ``head`` hc_head): the scratch
    buffer and the launch that says its layout."""
    gemm = _gemm_launch(*x.shape, fn.shape[0], _splits(n_splits), head, plan, x.device)
    return gemm(x, fn.contiguous()), gemm


def _splits(n_splits) -> int | None:
    if n_splits is not None and int(n_splits) < 1:
        raise validate.ContractError(f"n_splits must be >= 1, got {n_splits}")
    return None if n_splits is None else int(n_splits)


def _block_h(h: int, plan: LaunchPlan) -> int:
    return min(plan.block_h, next_power_of_2(h))


WIDE_GATES_MAX_TOKENS = 64


def _gates_block_h(tokens: int, h: int, plan: LaunchPlan, head: bool) -> int:
    """``_gates_and_mix``'s H tile: twice the plan's for mhc_pre up to
    ``WIDE_GATES_MAX_TOKENS`` tokens, where fewer, wider weighted-sum programs beside the one
    computing post and comb are faster; the plan's for larger batches and for hc_head, which are
    slower so (docs/kernels/mhc.md, "A wider gates tile"). The tile only
    groups a token's H elements, each computed by the same instructions: the suites force both."""
    wide = not head and tokens <= WIDE_GATES_MAX_TOKENS
    return min(_block_h(h, plan) * (2 if wide else 1), next_power_of_2(h))


def _h_parts(tokens: int, h_blocks: int, device: torch.device) -> int:
    """Programs per token of ``_gates_and_mix``: one while the tokens alone give two programs an
    SM, else as many (up to one per ``block_h`` chunk of H) as it takes. Each element of
    ``layer_input`` is computed by the same instructions whichever program computes it. Several
    programs a token make a small batch's weighted sum faster than one program a token walking
    H alone (docs/kernels/mhc.md has the measurements)."""
    wanted = 2 * (multiprocessors(device) or 1)
    return max(1, min(h_blocks, -(-wanted // max(tokens, 1))))


@functools.lru_cache(maxsize=1024)
def _gates_launch(t: int, m: int, h: int, gemm: _GemmLaunch, head: bool, plan: LaunchPlan,
                  device: torch.device) -> Launch:
    """``_gates_and_mix``'s launch (its H tile, H per program, programs per token), once per
    shape. The eps values, the post multiplier and the Sinkhorn rounds are passed per call.
    mhc_pre's post and comb get a program of their own while a token's weighted sum is spread
    over several (a decode batch), else the first program computes them before its sum: same
    instructions, same bits. The program of their own is faster at decode sizes and slower for
    large batches, where a token's sum is one program (docs/kernels/mhc.md, "mhc_pre's gates on
    a program of their own")."""
    block_h = _gates_block_h(t, h, plan, head)
    parts = _h_parts(t, cdiv(h, block_h), device)
    h_per_program = cdiv(cdiv(h, block_h), parts) * block_h
    programs = cdiv(h, h_per_program)
    gates_part = programs if not head and parts > 1 else 0
    return Launch(_gates_and_mix, (t, programs + (gates_part > 0)),
                  (gemm.sq_at, t, h, h_per_program, gemm.n_splits, gates_part),
                  dict(SPLITS_PAD=next_power_of_2(gemm.n_splits), CHUNKS=gemm.chunks, M=m,
                       M_PAD=next_power_of_2(m), N_PAD=gemm.n_pad, HEAD=head, BLOCK_H=block_h,
                       num_warps=plan.head_epilogue_warps if head else plan.epilogue_warps,
                       **dependent_launch(device, _next_early(t, head))))


def _gates(scratch, gemm: _GemmLaunch, streams, hc_scale, hc_base, out, post, comb, eps: tuple,
           hc_post_mult_value, sinkhorn_repeat, head: bool, plan: LaunchPlan) -> None:
    """The second kernel: per token, the mixes from the GEMM partials, the gates (and Sinkhorn
    for mhc_pre) and the weighted sum of the streams into ``out``."""
    t, m, h = streams.shape
    _gates_launch(t, m, h, gemm, head, plan, streams.device)(
        scratch, streams, hc_scale, hc_base, out, post, comb,
        after=(*map(float, eps), float(hc_post_mult_value), int(sinkhorn_repeat)))


def clear_launch_caches() -> None:
    """Forget every launch kept per shape or call signature (a test forcing launch shapes)."""
    for cached in (_gemm_launch, _gates_launch, _pre_call, _head_call, _post_call):
        cached.cache_clear()


@dataclasses.dataclass(frozen=True, eq=False)
class _MixCall:
    """An mhc_pre / hc_head call as its signature fixes it: the output shapes and both
    launches. Kept per call signature, so a decode step pays a lookup, its allocations and two
    launches."""
    tokens: int
    out_shape: tuple
    post_shape: tuple
    comb_shape: tuple
    gemm: _GemmLaunch
    gates: Launch


def _mix_call(streams: torch.Tensor, fn: torch.Tensor, m: int, h: int, n_splits: int | None,
              head: bool, plan: LaunchPlan) -> _MixCall:
    lead = tuple(streams.shape[:-2])
    t = streams.numel() // (m * h)
    gemm = _gemm_launch(t, m * h, fn.shape[0], n_splits, head, plan, streams.device)
    gates = _gates_launch(t, m, h, gemm, head, plan, streams.device)
    return _MixCall(t, (*lead, h), (*lead, m, 1), (*lead, m, m), gemm, gates)


@per_signature
def _pre_call(residual, fn, hc_scale, hc_base, sinkhorn_repeat: int, n_splits: int | None,
              plan: LaunchPlan) -> _MixCall:
    m, h = validate.check_pre(residual, fn, hc_scale, hc_base, sinkhorn_repeat)
    return _mix_call(residual, fn, m, h, n_splits, False, plan)


@per_signature
def _head_call(hidden_states, hc_fn, hc_scale, hc_base, n_splits: int | None,
               plan: LaunchPlan) -> _MixCall:
    m, h = validate.check_head(hidden_states, hc_fn, hc_scale, hc_base)
    return _mix_call(hidden_states, hc_fn, m, h, n_splits, True, plan)


@per_signature
def _post_call(x, residual, post_layer_mix, comb_res_mix, plan: LaunchPlan) -> Launch | None:
    m, h = validate.check_post(x, residual, post_layer_mix, comb_res_mix)
    t = residual.numel() // (m * h)
    block_h = _block_h(h, plan)
    return Launch(_post_mix, (t, cdiv(h, block_h)), (h,),
                  dict(M=m, M_PAD=next_power_of_2(m), BLOCK_H=block_h, num_warps=plan.post_warps,
                       **dependent_launch(x.device))) if t else None


KNOBS = {"n_splits": N_SPLITS_KNOB, "plan": PLANS}


@register("mhc_pre", "triton", **_HERE, batch_invariant=True, knobs=KNOBS)
def mhc_pre(residual, fn, hc_scale, hc_base, rms_eps, hc_pre_eps, hc_sinkhorn_eps,
            hc_post_mult_value, sinkhorn_repeat, n_splits=None, plan: LaunchPlan = DEFAULT_PLAN):
    sinkhorn_repeat = int(sinkhorn_repeat)
    call = _pre_call(residual, fn, hc_scale, hc_base, sinkhorn_repeat, _splits(n_splits), plan)
    device = residual.device
    post = torch.empty(call.post_shape, dtype=torch.float32, device=device)
    comb = torch.empty(call.comb_shape, dtype=torch.float32, device=device)
    layer_input = torch.empty(call.out_shape, dtype=torch.bfloat16, device=device)
    if call.tokens:  # contiguous tensors: the kernels' flat indexing holds
        res = residual.contiguous()
        scratch = call.gemm(res, fn.contiguous())
        call.gates(scratch, res, hc_scale.contiguous(), hc_base.contiguous(), layer_input, post,
                   comb, after=(float(rms_eps), float(hc_pre_eps), float(hc_sinkhorn_eps),
                                float(hc_post_mult_value), sinkhorn_repeat))
    return post, comb, layer_input


@register("mhc_post", "triton", **_HERE, batch_invariant=True, knobs={"plan": PLANS})
def mhc_post(x, residual, post_layer_mix, comb_res_mix, plan: LaunchPlan = DEFAULT_PLAN):
    launch = _post_call(x, residual, post_layer_mix, comb_res_mix, plan)
    out = torch.empty(residual.shape, dtype=torch.bfloat16, device=residual.device)
    if launch is not None:  # contiguous tensors: the kernel's flat indexing holds
        launch(x.contiguous(), residual.contiguous(), post_layer_mix.contiguous(),
               comb_res_mix.contiguous(), out)
    return out


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
    call = _head_call(hidden_states, hc_fn, hc_scale, hc_base, _splits(n_splits), plan)
    out = torch.empty(call.out_shape, dtype=torch.bfloat16, device=hidden_states.device)
    if call.tokens:
        hs = hidden_states.contiguous()
        call.gates(call.gemm(hs, hc_fn.contiguous()), hs, hc_scale.contiguous(),
                   hc_base.contiguous(), out, out, out,
                   after=(float(rms_eps), float(hc_eps), 0.0, 0.0, 0))
    return out
