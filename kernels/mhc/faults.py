"""Seeded faults of the mHC family, each modelled on a real way such kernels break."""

from __future__ import annotations

import torch

from harness.core.faults import SeededFaults
from harness.core.detectors import (BATCH_INVARIANCE, CONFIG_INVARIANCE, CUDA_GRAPH, DETERMINISM,
                                    DISPATCH_THRESHOLDS, INPUTS_UNCHANGED, LAYOUTS,
                                    POISONED_OUTPUTS, PRECISION_GROWTH)
from harness.core.layouts import as_packed
from kernels.mhc.probes import MHC_INPUTS
from harness.core.registry import Implementation
from kernels.mhc import torch as ref

FAULTS = SeededFaults()


def _impl(op: str, name: str, fn, **kw) -> Implementation:
    return Implementation(op=op, name=name, fn=fn, source=__name__, **kw)


@FAULTS.seed("gemm_fp16_above_T", "mhc_pre", "large-token precision", PRECISION_GROWTH)
def gemm_fp16_above_t(threshold: int) -> Implementation:
    """Like a kernel whose large-T path loads ``fn`` as fp16 for the tensor cores: inside the
    TF32 bound (a TF32-declared kernel could ship it), but its per-token error jumps above
    ``threshold`` tokens."""
    def mhc_pre(residual, fn, *args, n_splits=1):
        if residual.reshape(-1, *residual.shape[-2:]).shape[0] > threshold:
            fn = fn.half().float()
        return ref.mhc_pre(residual, fn, *args)
    return _impl("mhc_pre", "fault-gemm-fp16-above-T", mhc_pre)


def _pre_from_parts(residual, fn, hc_scale, hc_base, rms_eps, hc_pre_eps, hc_sinkhorn_eps,
                    hc_post_mult_value, sinkhorn_repeat, *, gemm=None, sum_sq=None, weigh=None):
    """mhc_pre in fp32 with the two reductions of the fused GEMM kernels replaceable:
    ``gemm(x, fn) -> [T, n_mix]`` and ``sum_sq(x) -> [T]`` (x is [T, m*H]), and the gated sum
    of the streams, ``weigh(pre [T, m], streams [T, m, H]) -> [T, H]``."""
    m, h = residual.shape[-2:]
    x = residual.reshape(-1, m * h).float()
    mixes = gemm(x, fn) if gemm else x @ fn.t()
    sq = sum_sq(x) if sum_sq else x.square().sum(-1)
    mixes = mixes * torch.rsqrt(sq.unsqueeze(-1) / (m * h) + rms_eps)
    pre, post, comb = ref.pre_gates(mixes, hc_scale, hc_base, m, hc_pre_eps, hc_sinkhorn_eps,
                                    hc_post_mult_value, sinkhorn_repeat)
    streams = x.view(-1, m, h)
    li = (weigh(pre, streams) if weigh else (pre.unsqueeze(-1) * streams).sum(1)).to(residual.dtype)
    return post, comb, li


@FAULTS.seed("bf16_products_above_T", "mhc_pre", "large-token precision in ulps", PRECISION_GROWTH)
def bf16_products_above_t(threshold: int) -> Implementation:
    """Above ``threshold`` tokens, ``layer_input`` sums its gated streams from products rounded
    to bf16 (a path that multiplies in bf16 before accumulating): 38% of its elements are an ulp
    off, yet at T=64, H=64 every one is inside the accuracy bound, and at T=257 only 1 to 8
    elements of 16K-51K leave it (measured on CPU). Its misrounded share moves 1000x."""
    def weigh(pre, streams):
        return (pre.unsqueeze(-1) * streams).bfloat16().float().sum(1)

    def mhc_pre(residual, *args, n_splits=1):
        if residual.reshape(-1, *residual.shape[-2:]).shape[0] <= threshold:
            return ref.mhc_pre(residual, *args)
        return _pre_from_parts(residual, *args, weigh=weigh)
    return _impl("mhc_pre", "fault-bf16-products-above-T", mhc_pre)


@FAULTS.seed("last_tile_gemm_fp16_above_T", "mhc_pre", "large-token precision in a few tokens",
       PRECISION_GROWTH)
def last_tile_gemm_fp16_above_t(threshold: int) -> Implementation:
    """Above ``threshold`` tokens, the last tile of 128 tokens (partial, or full when T is a
    multiple of 128) takes a path that loads ``fn`` as fp16: inside the TF32 bound, in at most
    128 tokens (p50 and p99 of the per-token error barely move; their maximum does)."""
    def gemm(x, fn):
        mixes = x @ fn.t()
        tail = (x.shape[0] % 128 or 128) if x.shape[0] > threshold else 0
        if tail:
            mixes[-tail:] = x[-tail:] @ fn.half().float().t()
        return mixes

    def mhc_pre(*args, n_splits=1):
        return _pre_from_parts(*args, gemm=gemm)
    return _impl("mhc_pre", "fault-last-tile-gemm-fp16-above-T", mhc_pre)


@FAULTS.seed("reduction_order_depends_on_T", "mhc_pre", "batch dependence", BATCH_INVARIANCE)
def reduction_order_depends_on_t(threshold: int) -> Implementation:
    """Claims bitwise batch invariance but picks its split-K from T (a heuristic that changes
    the summation order, so a token's bits change with the batch it is in)."""
    def split_k_by_t(x, fn):
        splits = 1 if x.shape[0] <= 1 else 8
        return sum(xc @ fc.t() for xc, fc in zip(x.chunk(splits, dim=1), fn.chunk(splits, dim=1)))

    def mhc_pre(*args, n_splits=1):
        return _pre_from_parts(*args, gemm=split_k_by_t)
    return _impl("mhc_pre", "fault-reduction-order-depends-on-T", mhc_pre, batch_invariant=True)


@FAULTS.seed("sum_of_squares_race", "mhc_pre", "intermittent race", DETERMINISM)
def sum_of_squares_race(threshold: int) -> Implementation:
    """ROCm/aiter PR 3033: the lane holding row 0's sum of squares also wrote row 16's slot,
    depending on scheduling. Here the race loses on every third call, starting with the second:
    a case run once passes; run three times, the second run's RMS of token 16 is token 0's."""
    calls = [0]

    def sum_sq(x):
        sq = x.square().sum(-1)
        calls[0] += 1
        if calls[0] % 3 == 2 and sq.shape[0] > 16:
            sq[16] = sq[0]
        return sq

    def mhc_pre(*args, n_splits=1):
        return _pre_from_parts(*args, sum_sq=sum_sq)
    return _impl("mhc_pre", "fault-sum-of-squares-race", mhc_pre)


@FAULTS.seed("block_m_carry_over_from_1024", "mhc_pre", "dispatch threshold", DISPATCH_THRESHOLDS)
def block_m_carry_over_from_1024(threshold: int) -> Implementation:
    """vLLM PR 49429: from 1024 tokens a block-M GEMM handles two rows per block and never
    clears the accumulator between them, so each odd row's mixes are the sum of both rows'."""
    def gemm(x, fn):
        mixes = x @ fn.t()
        if x.shape[0] >= 1024:
            pairs = x.shape[0] // 2
            mixes[1:2 * pairs:2] += mixes[0:2 * pairs:2]
        return mixes

    def mhc_pre(*args, n_splits=1):
        return _pre_from_parts(*args, gemm=gemm)
    return _impl("mhc_pre", "fault-block-m-carry-over-from-1024", mhc_pre)


@FAULTS.seed("last_tile_transposed_above_4096", "mhc_post", "dispatch threshold", DISPATCH_THRESHOLDS)
def last_tile_transposed_above_4096(threshold: int) -> Implementation:
    """A path for more than 4096 tokens whose partial last tile (T % 128 tokens) reads the
    stream-mixing matrix transposed: every count the accuracy sweep of a CPU run uses is fine."""
    def mhc_post(x, residual, post_layer_mix, comb_res_mix):
        t = residual.shape[0]
        tail = t % 128 if t > 4096 else 0
        if tail:
            comb_res_mix = comb_res_mix.clone()
            comb_res_mix[-tail:] = comb_res_mix[-tail:].transpose(-1, -2).clone()
        return ref.mhc_post(x, residual, post_layer_mix, comb_res_mix)
    return _impl("mhc_post", "fault-last-tile-transposed-above-4096", mhc_post)


@FAULTS.seed("reads_neighbour_row", "mhc_post", "batch dependence", BATCH_INVARIANCE)
def reads_neighbour_row(threshold: int) -> Implementation:
    """An off-by-one row index: each token's output leaks a little of the next token's residual
    (wraps to itself for the last), so it depends on who its neighbours are."""
    def mhc_post(x, residual, post_layer_mix, comb_res_mix):
        out = ref.mhc_post_compute(x, residual, post_layer_mix, comb_res_mix, round_output=False)
        neighbour = torch.roll(residual.float(), shifts=-1, dims=0)
        return (out + 0.05 * neighbour).to(residual.dtype)
    return _impl("mhc_post", "fault-reads-neighbour-row", mhc_post)


@FAULTS.seed("unwritten_tail_tile", "mhc_post", "out-of-bounds / unwritten output", POISONED_OUTPUTS)
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


@FAULTS.seed("split_k_drops_last_split", "hc_head", "config dependence", CONFIG_INVARIANCE)
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


@FAULTS.seed("post_writes_residual", "mhc_post", "inputs clobbered", INPUTS_UNCHANGED)
def post_writes_residual(threshold: int) -> Implementation:
    """Right output, but the residual stream it was given is overwritten in place (a kernel
    that reuses its input buffer as scratch): the next layer reads garbage."""
    def mhc_post(x, residual, post_layer_mix, comb_res_mix):
        out = ref.mhc_post(x, residual, post_layer_mix, comb_res_mix)
        residual[-1].zero_()
        return out
    return _impl("mhc_post", "fault-post-writes-residual", mhc_post)


@FAULTS.seed("host_sync_breaks_capture", "mhc_post", "CUDA-graph capture", CUDA_GRAPH, needs_gpu=True)
def host_sync_breaks_capture(threshold: int) -> Implementation:
    """Right answers, but a finiteness check reads a flag back to the host after the kernel:
    eagerly a hidden sync, inside a CUDA graph capture an error (vLLM decode cannot use it)."""
    def mhc_post(x, residual, post_layer_mix, comb_res_mix):
        out = ref.mhc_post(x, residual, post_layer_mix, comb_res_mix)
        if not bool(torch.isfinite(out).all()):
            raise FloatingPointError("mhc_post produced non-finite values")
        return out
    return _impl("mhc_post", "fault-host-sync-breaks-capture", mhc_post)


@FAULTS.seed("tail_tile_writes_past_residual", "mhc_post", "out-of-bounds write", INPUTS_UNCHANGED)
def tail_tile_writes_past_residual(threshold: int) -> Implementation:
    """Right output, but its partial last tile stores a full tile of scratch back into the
    residual buffer it was given, unmasked: the rows after the last token (another tensor's
    memory in a real allocator) are overwritten."""
    def mhc_post(x, residual, post_layer_mix, comb_res_mix):
        out = ref.mhc_post(x, residual, post_layer_mix, comb_res_mix)
        storage = residual.untyped_storage()
        whole = residual.new_empty(0).set_(storage, residual.storage_offset(),
                                           (storage.nbytes() // residual.element_size()
                                            - residual.storage_offset(),))
        past = whole[residual.numel():residual.numel() + residual[0].numel()]
        past.zero_()
        return out
    return _impl("mhc_post", "fault-tail-tile-writes-past-residual", mhc_post)


def _persistent(shape, like: torch.Tensor, buffers: dict) -> torch.Tensor:
    key = (tuple(shape), like.dtype, str(like.device))
    if key not in buffers:
        buffers[key] = torch.empty(shape, dtype=like.dtype, device=like.device)
    return buffers[key]


@FAULTS.seed("persistent_buffer_race", "mhc_post", "intermittent race behind a reused buffer",
             DETERMINISM)
def persistent_buffer_race(threshold: int) -> Implementation:
    """Returns one persistent output buffer per shape (as serving code with static buffers
    does), and on every call after the first its last token's first element is 0.5 off (a race
    that loses once the buffer is warm). A determinism check that keeps run 1's output
    without a copy compares that buffer with itself and sees nothing."""
    buffers: dict = {}

    def mhc_post(x, residual, post_layer_mix, comb_res_mix):
        result = ref.mhc_post(x, residual, post_layer_mix, comb_res_mix)
        out = _persistent(result.shape, result, buffers)
        warm = getattr(out, "_warm", False)
        out.copy_(result)
        if warm:
            out.view(out.shape[0], -1)[-1, 0] += 0.5
        out._warm = True
        return out
    return _impl("mhc_post", "fault-persistent-buffer-race", mhc_post)


@FAULTS.seed("persistent_buffer_stale_in_replay", "mhc_post", "CUDA-graph replay",
             CUDA_GRAPH, needs_gpu=True)
def persistent_buffer_stale_in_replay(threshold: int) -> Implementation:
    """Returns one persistent output buffer per shape, and its captured path (a launch chosen
    while the stream captures) leaves the last token unwritten, so a replay keeps whatever the
    buffer held. An eager call then rewrites the same buffer: a check comparing the replay's
    output with it without a copy compares the buffer with itself."""
    buffers: dict = {}

    def mhc_post(x, residual, post_layer_mix, comb_res_mix):
        result = ref.mhc_post(x, residual, post_layer_mix, comb_res_mix)
        out = _persistent(result.shape, result, buffers)
        if torch.cuda.is_available() and torch.cuda.is_current_stream_capturing():
            out[:-1].copy_(result[:-1])
        else:
            out.copy_(result)
        return out
    return _impl("mhc_post", "fault-persistent-buffer-stale-in-replay", mhc_post)


@FAULTS.seed("rms_eps_outside_rsqrt", "mhc_pre", "eps misplaced", MHC_INPUTS)
def rms_eps_outside_rsqrt(threshold: int) -> Implementation:
    """``rsqrt(mean(x^2)) + eps`` instead of ``rsqrt(mean(x^2) + eps)``: the same to 1e-6 on
    ordinary tokens, NaN on an all-zero (padding) token and gates off their scale on a tiny one."""
    def mhc_pre(residual, fn, hc_scale, hc_base, rms_eps, *rest, n_splits=1):
        m, h = residual.shape[-2:]
        x = residual.reshape(-1, m * h).float()
        mixes = (x @ fn.t()) * (torch.rsqrt(x.square().mean(-1, keepdim=True)) + rms_eps)
        pre, post, comb = ref.pre_gates(mixes, hc_scale, hc_base, m, *rest)
        li = (pre.unsqueeze(-1) * x.view(-1, m, h)).sum(1).to(residual.dtype)
        return post, comb, li
    return _impl("mhc_pre", "fault-rms-eps-outside-rsqrt", mhc_pre)


@FAULTS.seed("squares_in_fp16", "hc_head", "overflow on large activations", MHC_INPUTS)
def squares_in_fp16(threshold: int) -> Implementation:
    """Squares the streams in fp16 for the RMS (a half-precision prologue): exact enough on
    ordinary tokens, inf on a token with massive activations (|x| > 256), whose gates then
    collapse to sigmoid(hc_base)."""
    def hc_head(hidden_states, hc_fn, hc_scale, hc_base, rms_eps, hc_eps):
        m, h = hidden_states.shape[-2:]
        x = hidden_states.reshape(-1, m * h).float()
        sq = x.half().square().float().mean(-1, keepdim=True)
        mixes = (x @ hc_fn.t()) * torch.rsqrt(sq + rms_eps)
        pre = torch.sigmoid(mixes * hc_scale + hc_base) + hc_eps
        return (pre.unsqueeze(-1) * x.view(-1, m, h)).sum(1).to(hidden_states.dtype)
    return _impl("hc_head", "fault-squares-in-fp16", hc_head)


@FAULTS.seed("hidden_tail_unwritten_past_2048", "mhc_post", "partial column tile dropped",
             MHC_INPUTS)
def hidden_tail_unwritten_past_2048(threshold: int) -> Implementation:
    """A wide-hidden path (H > 2048) of 1024-column tiles launched for H // 1024 tiles without a
    mask: the last H % 1024 columns are never written. Both production sizes are multiples of
    1024, so only another hidden size shows it."""
    def mhc_post(x, residual, post_layer_mix, comb_res_mix):
        out = ref.mhc_post(x, residual, post_layer_mix, comb_res_mix)
        h = out.shape[-1]
        if h > 2048 and h % 1024:
            out[..., h - h % 1024:] = 0
        return out
    return _impl("mhc_post", "fault-hidden-tail-unwritten-past-2048", mhc_post)


@FAULTS.seed("residual_rows_at_packed_width", "mhc_post", "strided input read as packed", LAYOUTS)
def residual_rows_at_packed_width(threshold: int) -> Implementation:
    """Reads token t's streams at ``t * m * H`` from the residual's first element instead of at
    ``t * residual.stride(0)``: right on a fresh residual, another token's (or the padding's)
    streams on a residual sliced from a wider buffer."""
    def mhc_post(x, residual, post_layer_mix, comb_res_mix):
        return ref.mhc_post(x, as_packed(residual), post_layer_mix, comb_res_mix)
    return _impl("mhc_post", "fault-residual-rows-at-packed-width", mhc_post)


@FAULTS.seed("mixes_assumed_packed", "mhc_post", "mix columns read as packed", LAYOUTS)
def mixes_assumed_packed(threshold: int) -> Implementation:
    """Reads ``post_layer_mix`` as a packed [T, m] and ``comb_res_mix`` as a packed [T, m, m]
    from their first elements: right when each mix is its own tensor, wrong when they are column
    slices of one [T, m*(m+2)] buffer (token t's mixes sit a whole row of that buffer apart)."""
    def mhc_post(x, residual, post_layer_mix, comb_res_mix):
        return ref.mhc_post(x, residual, as_packed(post_layer_mix), as_packed(comb_res_mix))
    return _impl("mhc_post", "fault-mixes-assumed-packed", mhc_post)


@FAULTS.seed("comb_inner_strides_assumed", "mhc_post", "transposed input read untransposed",
             LAYOUTS)
def comb_inner_strides_assumed(threshold: int) -> Implementation:
    """Honours ``comb_res_mix.stride(0)`` but indexes each token's [m, m] block as row-major
    (strides m, 1): a transposed comb is read as its transpose, so stream j takes row j of
    comb instead of column j. Only a transposed comb shows it."""
    def mhc_post(x, residual, post_layer_mix, comb_res_mix):
        m = comb_res_mix.shape[-1]
        comb = comb_res_mix.as_strided(comb_res_mix.shape, (comb_res_mix.stride(0), m, 1),
                                       comb_res_mix.storage_offset())
        return ref.mhc_post(x, residual, post_layer_mix, comb)
    return _impl("mhc_post", "fault-comb-inner-strides-assumed", mhc_post)


@FAULTS.seed("residual_padding_as_scratch", "mhc_pre", "write into the parent buffer's padding",
             LAYOUTS)
def residual_padding_as_scratch(threshold: int) -> Implementation:
    """Right outputs, but where the residual's rows are padded (stride(0) > m * H) it parks each
    token's sum of squares in the padding after its row, as scratch: memory outside the view it
    was given, another tensor's in a real caller's buffer."""
    def mhc_pre(residual, *args, n_splits=1):
        out = ref.mhc_pre(residual, *args)
        rows = residual.reshape(-1, *residual.shape[-2:]) if residual.dim() > 3 else residual
        width = rows.shape[-2] * rows.shape[-1]
        if rows.dim() == 3 and rows.stride(0) > width and rows.stride(1) == rows.shape[-1]:
            pad = rows.as_strided((rows.shape[0], 1), (rows.stride(0), 1),
                                  rows.storage_offset() + width)
            pad.copy_(rows.float().square().sum((-2, -1)).unsqueeze(-1).to(pad.dtype))
        return out
    return _impl("mhc_pre", "fault-residual-padding-as-scratch", mhc_pre)
