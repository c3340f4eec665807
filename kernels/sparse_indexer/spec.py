"""Op specs of the sparse-attention indexer: fp8 quantisation, the K cache, MQA logits.

Inputs model DeepSeek-V3.2's indexer: head_dim 128, 64 heads (case parameter ``heads``), K and
Q activations ~ N(0, 1) with per-token scales spread over ~e^{+-1} and a few outlier channels,
mixed-sign head weights (so relu-before-the-head-sum matters), a ragged prefill batch (``seqs``
sequences sharing a cached ``context`` budget, as for top-k; ``tokens`` query rows) and a paged
decode batch (``tokens`` = requests x ``next_n`` query rows, or ``batch`` requests; ``context``
the maximum context; ``shuffled`` block tables, unused cache slots and spare blocks full of
garbage bytes, including fp8 NaN patterns, which a correct kernel never lets into a visible
logit). ``scale_fmt``: None or ``ue8m0`` (power-of-two scales). ``head_dim`` (default 128)
and, for the K cache, ``block_size`` slots a block (default 64, the contract's; 1 is ROCm's
per-token cache, whose blocks start at ``(head_dim + 4) * block`` bytes, not 16-byte aligned):
BLOCK_SIZES and HEAD_DIM_CELLS say which are judged and why (docs/spec/indexer_block_sizes.md).

Comparisons:
- quantised values, scales and the whole cache: bit-exact (RTNE of x / scale is deterministic),
  except that an fp8 -0 equals +0;
- logits: the ``-inf`` pattern (the visibility mask) exactly, and every finite value within
  ``allowed * bound``, where ``bound = sum_h |w| sum_d |q k| * k_scale`` (float64). The inputs
  are fp8 already, so every product is exact and the only error an implementation may add is
  accumulation rounding. With the standard bound ``|fl(sum) - sum| <= n * u * sum |terms|``:
  ``fp32`` accumulation (the default class): ``head_dim`` roundings in the dot product, one for
  the scale, one for the weight, ``heads`` in the head sum, u = 2**-24:
  ``allowed = (head_dim + heads + 8) * 2**-24``.
  ``fp8-mma`` (declared by kernels on Hopper fp8 tensor cores, whose accumulator keeps about 14
  bits: DeepSeek-V3 technical report, section 3.3.2): calibrated on the H100 (``FP8_MMA_U``):
  every logit within 2**-9 of its bound, and the 99th percentile and mean of a call's errors
  within 2**-12 and 768 u, which a bf16 intermediate exceeds. Each row of the report names the
  class. A relu in the wrong place, a missing scale or a wrong key is orders of magnitude beyond
  either.
"""

from __future__ import annotations

import dataclasses

import torch

from kernels.topk.batches import decode_seq_lens, ragged_prefill
from harness.core import call_sequences
from harness.core.call_sequences import Step
from harness.core.cases import Case, generator
from harness.core.errors import ContractViolation
from harness.core.fuzz_space import Choice, FuzzSpace, Sizes, context_holds_drafts, flag
from harness.core.input_space import GPU_PROFILES, Cell, InputSpace, at_least, between
from harness.core.specs import Comparison, OpSpec, contract, register_spec
from kernels.sparse_indexer import torch as ref
from kernels.sparse_indexer.validate import FP8, SCALE_BYTES

HEAD_DIM = 128
HEADS = 64
BLOCK_SIZE = 64
U32 = 2.0 ** -24
TIES = (448.0, 1.0625, 1.1875, 17.0, -1.0625, 0.001953125, 0.0029296875, 304.0, -0.0048828125)
"""A row whose scale is exactly 1 (amax 448): values halfway between two e4m3 neighbours, the
smallest subnormal and a subnormal tie, so round-half-even is checked, not just rounding."""


def _activations(case: Case, salt: int, *shape: int) -> torch.Tensor:
    """K or Q activations [..., HEAD_DIM] in bf16, drawn as the case's ``data`` says."""
    g = generator(case, salt, case.device)
    x = torch.randn(*shape, generator=g, device=case.device)
    x = x * torch.exp(torch.randn(*shape[:-1], 1, generator=g, device=case.device))
    x[..., :3] *= 8.0
    data = case.param("data", "random")
    if data not in DISTRIBUTIONS:
        raise ValueError(f"{case.id}: unknown indexer data {data!r}; choose one of "
                         f"{', '.join(DISTRIBUTIONS)}")
    return DISTRIBUTIONS[data][0](x, g).to(torch.bfloat16)


def _zero_rows(x: torch.Tensor, g) -> torch.Tensor:
    """Every fourth token all zero (from the second): amax 0, so the scale is the floor's."""
    x[1::4] = 0
    return x


def _fp8_max_rows(x: torch.Tensor, g) -> torch.Tensor:
    """Every row's amax exactly 448 * 2^e (e in [-6, 6]) and a quarter of its values at +-amax:
    power-of-two scales are exact, so those values land on the e4m3 maximum (code 0x7E)."""
    rows = x.reshape(-1, x.shape[-1])
    e = torch.randint(-6, 7, (rows.shape[0], 1), generator=g, device=x.device).float()
    top = 448.0 * torch.exp2(e)
    rows = rows / rows.abs().amax(-1, keepdim=True).clamp_min(1e-30) * top * 0.9
    at_max = torch.rand(rows.shape, generator=g, device=x.device) < 0.25
    at_max[:, 0] = True
    rows = torch.where(at_max, torch.sign(rows).clamp_min(0) * 2 - 1, rows / top) * top
    return rows.reshape(x.shape)


DISTRIBUTIONS = {
    "random": (lambda x, g: x, "N(0, 1) activations, per-token scales over ~e^{+-1}, three "
               "outlier channels"),
    "zero-tokens": (_zero_rows, "all-zero K and Q tokens (padding): the 1e-4 amax floor keeps "
                    "the scale finite"),
    "fp8-max": (_fp8_max_rows, "rows whose amax is exactly 448 * 2^e: power-of-two scales are "
                "exact and many values land on the e4m3 maximum"),
}
"""How K and Q activations are drawn (``data``): name -> (transform, what it stands for)."""

VALUE_CELLS = tuple(Cell("values", name, what, {"data": name})
                    for name, (_, what) in DISTRIBUTIONS.items())
QUANT_SIZES = (
    Cell("sizes", "T = 1..4", "single tokens (decode)", {"tokens": between(1, 4)}),
    Cell("sizes", "T = 5..4096", "partial and whole blocks of 64 slots", {"tokens": between(5, 4096)}),
    Cell("sizes", "T > 4096", "prefill chunks (4099, 65536)", {"tokens": at_least(4097)}),
)
UE8M0 = Cell("metadata", "ue8m0 scales", "scales rounded up to a power of two",
             {"scale_fmt": "ue8m0"})
NIGHTLY_PROFILES = ("nightly", "full")
OUTPUT_PAST_2_31_ELSEWHERE = ("an output of more than 2^31 elements (8.6 GB fp32, twice with "
                              "the copy judged) needs a GPU to itself: nightly and full only")
HEAD_DIMS = (32, 64, HEAD_DIM)
"""Head dims judged: vLLM 0.33.0's DeepseekV32IndexerBackend declares 32, 64 and 128."""
HEAD_DIM_CELLS = (
    Cell("metadata", "head_dim 32", "the smallest indexer head vLLM declares: one fp8 MMA "
         "deep, 36 bytes a slot", {"head_dim": 32}),
    Cell("metadata", "head_dim 64", "a narrower indexer head than DeepSeek-V3.2's 128: every "
         "offset that hard-codes 128 values (or 132 bytes a slot) lands elsewhere",
         {"head_dim": 64}),
)
"""Head dims other than 128, on every op; an implementation that does not take one declares it
(``Unsupported``) and refuses it with a clear error (the shipped kernels: triton.HEAD_DIMS)."""
BLOCK_SIZES = (1, 16, 48, 64, 128)
"""K-cache block sizes judged (docs/spec/indexer_block_sizes.md has why): the ones vLLM 0.33.0's
indexer backends accept (DeepSeek-V3.2: 64 off ROCm, 1 or a multiple of 16 on ROCm; V4.1: 64 or
128). 64 is the contract's (DeepGEMM's); 1 ROCm's per-token cache, AITER's paged Triton
reader's, whose block bases are not 16-byte aligned; 16 one SHUFFLE tile; 48 a multiple of 16
that is not a power of two; 128 a block of two 64-key tiles."""
BLOCK_SIZE_CELLS = (
    Cell("metadata", "block size 1", "ROCm's per-token K cache: each slot head_dim fp8 values, "
         "then its 4 scale bytes; block bases at (head_dim + 4) * b bytes, not 16-byte aligned",
         {"block_size": 1}),
    Cell("metadata", "block size 16", "blocks of 16 slots: one SHUFFLE tile, fewer slots than a "
         "64-key MMA tile", {"block_size": 16}),
    Cell("metadata", "block size 48", "blocks of 48 slots: a multiple of 16 (ROCm accepts any) "
         "that is not a power of two, so no power-of-two tile covers a block", {"block_size": 48}),
    Cell("metadata", "block size 64", "the contract's (DeepGEMM's) blocks of 64 slots",
         {"block_size": 64}),
    Cell("metadata", "block size 128", "blocks of 128 slots (vLLM's DeepSeek-V4.1 indexer off "
         "Hopper): two 64-key tiles a block", {"block_size": 128}),
)


NEG_ZERO_FP8 = 0x80


def comparable_bytes(t: torch.Tensor, fp8_region: int | None) -> torch.Tensor:
    """Bytes to compare, with fp8 -0 (0x80) read as +0: RTNE(x / scale) of a tiny negative x is
    a signed zero, and the sign of a zero logit term is not part of the contract."""
    raw = t.contiguous().view(torch.uint8)
    if fp8_region is None:
        return raw
    flat = raw.reshape(raw.shape[0], -1).clone() if raw.numel() else raw.clone()
    region = flat[..., :fp8_region] if fp8_region >= 0 else flat
    region.masked_fill_(region == NEG_ZERO_FP8, 0)
    return flat


def _exact_row(name: str, out: torch.Tensor, ref_t: torch.Tensor, dtype: torch.dtype,
               fp8_region: int | None = None) -> dict:
    row = {"output": name, "shape": tuple(out.shape), "dtype": str(out.dtype).replace("torch.", "")}
    if tuple(out.shape) != tuple(ref_t.shape) or out.dtype != dtype:
        return {**row, "passed": False,
                "detail": f"got {out.dtype} {tuple(out.shape)}, contract {dtype} {tuple(ref_t.shape)}"}
    a, b = comparable_bytes(out, fp8_region), comparable_bytes(ref_t, fp8_region)
    bad = int((a != b).sum())
    diff = (out.double() - ref_t.double()).abs()
    finite = torch.isfinite(diff)
    return {**row, "passed": bad == 0, "mismatch_frac": bad / max(a.numel(), 1),
            "mismatch_bytes": bad,
            "max_abs": float(diff[finite].max()) if bool(finite.any()) else 0.0,
            "detail": f"{bad} of {a.numel()} bytes differ from the reference (must be bit-exact)"
            if bad else ""}


APPROXIMATE_DIVISION = {"value_steps": 1, "scale_ulps": 2, "value_share": 2.0 ** -9,
                        "value_slack": 8, "scale_share": 1.0}
"""What ``fp32_division: approximate`` admits in a K cache: Triton lowers fp32 ``/`` on NVIDIA
GPUs to ``div.full.f32`` (within 2 ulp), so ``amax / 448`` may land 2 ulp off the correctly
rounded scale (any scale may), and ``x / scale`` one e4m3 step off where it sits near a rounding
boundary: at most ``value_share`` of the value bytes (plus ``value_slack``, for small caches).
``value_share`` is 3x the largest share vLLM 0.33.0's Triton writer moves (5446 of 8388608 values
at T=65536, scale_fmt None, each one step or one ulp; ue8m0 scales are bit-exact:
docs/kernels/sparse_indexer.md has every size). A writer that rounds toward zero moves half its
values and fails."""


def _ordered(ints: torch.Tensor, sign_bit: int) -> torch.Tensor:
    """Sign-magnitude bit patterns (e4m3 bytes, fp32 words) as integers whose difference counts
    representable steps."""
    ints = ints.long()
    return torch.where(ints & sign_bit != 0, -(ints & (sign_bit - 1)), ints)


def cache_row(out: torch.Tensor, ref_t: torch.Tensor, block_values: int,
              division: str = "exact") -> dict:
    """A K cache against the reference cache: bit-exact, or, for a writer that declares
    ``fp32_division: approximate``, within APPROXIMATE_DIVISION (all other bytes exact). Says
    where the first difference is (block, slot, value or scale)."""
    row = _exact_row("kv_cache", out, ref_t, torch.uint8, block_values)
    if row.get("passed", True) or "mismatch_frac" not in row:
        return row
    a = comparable_bytes(out, block_values).reshape(out.shape[0], -1)
    b = comparable_bytes(ref_t, block_values).reshape(out.shape[0], -1)
    value_diff = (a[:, :block_values] != b[:, :block_values])
    scale_a = a[:, block_values:].contiguous().view(torch.int32)
    scale_b = b[:, block_values:].contiguous().view(torch.int32)
    scale_diff = scale_a != scale_b
    where = []
    if bool(value_diff.any()):
        blk, byte = (int(i) for i in value_diff.nonzero()[0])
        where.append(f"{int(value_diff.sum())} value bytes (first: block {blk}, value byte "
                     f"{byte})")
    if bool(scale_diff.any()):
        blk, slot = (int(i) for i in scale_diff.nonzero()[0])
        where.append(f"{int(scale_diff.sum())} scales (first: block {blk}, slot {slot})")
    detail = f"{row['detail']}: {'; '.join(where)}"
    if division != "approximate":
        return {**row, "detail": detail}
    steps = (_ordered(a[:, :block_values], 0x80) - _ordered(b[:, :block_values], 0x80)).abs()
    ulps = (_ordered(scale_a, 1 << 31) - _ordered(scale_b, 1 << 31)).abs()
    worst_step = int(steps.max()) if steps.numel() else 0
    worst_ulp = int(ulps.max()) if ulps.numel() else 0
    moved, scales_moved = int((steps > 0).sum()), int((ulps > 0).sum())
    may_move = APPROXIMATE_DIVISION["value_share"] * steps.numel() + APPROXIMATE_DIVISION["value_slack"]
    may_move_scales = APPROXIMATE_DIVISION["scale_share"] * max(ulps.numel(), 16)
    within = (worst_step <= APPROXIMATE_DIVISION["value_steps"]
              and worst_ulp <= APPROXIMATE_DIVISION["scale_ulps"]
              and moved <= may_move and scales_moved <= may_move_scales)
    verdict = ("within the declared approximate fp32 division" if within else
               "beyond the declared approximate fp32 division")
    return {**row, "passed": within,
            "detail": f"{detail}; worst {worst_step} e4m3 step(s), {worst_ulp} fp32 ulp(s) of a "
                      f"scale, {moved} values and {scales_moved} scales moved: {verdict} (at "
                      f"most {APPROXIMATE_DIVISION['value_steps']} step on {may_move:.0f} "
                      f"values, {APPROXIMATE_DIVISION['scale_ulps']} ulps on "
                      f"{may_move_scales:.0f} scales)"}


FP8_MMA_U = {"worst": 2 ** 15, "p99": 2 ** 12, "mean": 768}
"""The ``fp8-mma`` class at 64 heads, in u = 2^-24 of each logit's bound: every visible logit
within ``worst``; over a call of at least FP8_MMA_SAMPLE visible logits, their 99th percentile
within ``p99`` and their mean within ``mean``. Each head's error is its own (an accumulation
order, a rounding), so over h heads the sum's error grows as sqrt(h) while the bound grows as h:
the figures scale by sqrt(64 / h) (FP8_MMA_HEADS). Set from ``scripts/calibrate_fp8_mma.py`` on
the H100 (docs/kernels/sparse_indexer.md has the figures): the shipped kernels' worst/p99/mean
reach 14116/2012/362 u at 64 heads, so the bounds sit 2.3x/2.0x/2.1x above them; a kernel that
also rounds head weights, key scales or scores to bf16 reaches at least 14449/7128/1341 u: its
tail hides under any bound an fp8 kernel needs, its p99 and mean do not."""
FP8_MMA_HEADS = 64
FP8_MMA_SAMPLE = 4096
"""Fewer visible logits make a percentile or a mean the worst of a handful: only ``worst``."""


def fp8_mma_u(stat: str, heads: int) -> float:
    return FP8_MMA_U[stat] * (FP8_MMA_HEADS / max(heads, 1)) ** 0.5


ACCUMULATION = {"fp32": lambda d, h: (d + h + 8) * U32,
                "fp8-mma": lambda d, h: fp8_mma_u("worst", h) * U32}


def _fp8_mma_spread(share_u: torch.Tensor, heads: int) -> tuple[dict, list[str]]:
    """The p99 and mean of the visible logits' errors (in u of their bound) and what exceeds
    the fp8-mma figures at ``heads``, for calls of at least FP8_MMA_SAMPLE visible logits."""
    if share_u.numel() < FP8_MMA_SAMPLE:
        return {}, []
    flat = share_u.float().reshape(-1)
    p99 = float(flat.kthvalue(max(1, int(0.99 * flat.numel()))).values)
    mean = float(share_u.mean())
    p99_max, mean_max = fp8_mma_u("p99", heads), fp8_mma_u("mean", heads)
    problems = [f"p99 of the visible logits' error {p99:.0f} u beyond the fp8-mma {p99_max:.0f} u"
                ] if p99 > p99_max else []
    problems += [f"mean error {mean:.0f} u beyond the fp8-mma {mean_max:.0f} u (an extra "
                 "rounding on every logit, e.g. a bf16 intermediate)"] if mean > mean_max else []
    return {"p99_err_in_u_bound": p99, "mean_err_in_u_bound": mean}, problems


def logits_row(out: torch.Tensor, expect: torch.Tensor, bound: torch.Tensor, dims: tuple[int, int],
               accumulation: str = "fp32") -> dict:
    row = {"output": "logits", "shape": tuple(out.shape), "dtype": str(out.dtype).replace("torch.", "")}
    if tuple(out.shape) != tuple(expect.shape) or out.dtype != torch.float32:
        return {**row, "passed": False, "detail": f"got {out.dtype} {tuple(out.shape)}, contract "
                f"float32 {tuple(expect.shape)}"}
    out_ninf, ref_ninf = torch.isneginf(out), torch.isneginf(expect)
    nan, posinf = int(torch.isnan(out).sum()), int(torch.isposinf(out).sum())
    mask_bad = int((out_ninf != ref_ninf).sum())
    vis = ~ref_ninf & torch.isfinite(out)
    err = (out[vis].double() - expect[vis].double()).abs()
    if accumulation not in ACCUMULATION:
        return {**row, "passed": False, "detail": f"unknown accumulation class {accumulation!r}; "
                f"declare one of {', '.join(ACCUMULATION)}"}
    factor = ACCUMULATION[accumulation](*dims)
    allowed = factor * bound[vis]
    over = int((err > allowed).sum())
    share_u = err / (bound[vis] * U32).clamp_min(1e-300)
    ratio = float(share_u.max()) if err.numel() else 0.0
    spread, problems = (_fp8_mma_spread(share_u, dims[1]) if accumulation == "fp8-mma"
                        else ({}, []))
    problems = ([f"{nan} NaN"] if nan else []) + problems
    problems += [f"{posinf} +inf"] if posinf else []
    problems += [f"-inf pattern differs at {mask_bad} cells (visibility mask)"] if mask_bad else []
    problems += [f"{over} visible logits beyond the {accumulation} accumulation bound "
                 f"({factor / U32:.0f} u of their magnitude; worst {ratio:.0f} u)"] if over else []
    used = float((err / allowed.clamp_min(1e-300)).max()) if err.numel() else 0.0
    return {**row, "passed": not problems, "max_abs": float(err.max()) if err.numel() else 0.0,
            "tol_used": used,
            "accumulation": accumulation,
            "max_err_in_u_bound": ratio, **spread, "mask_mismatch": mask_bad, "nan_count": nan,
            "mismatch_frac": (over + mask_bad) / max(out.numel(), 1), "detail": "; ".join(problems)}


FUZZ_TOKENS = Sizes(1, 65536, edges=(1, 2, 3, 4, 5, 63, 64, 65, 127, 129, 4097))
FUZZ_DATA = Choice(tuple(DISTRIBUTIONS))
FUZZ_HEADS = Sizes(1, 64, edges=(1, 4, 64))
FUZZ_CONTEXT = Sizes(1, 131072, edges=(1, 63, 64, 65, 128, 4096, 4097, 8192, 65536, 131072))
FUZZ_BLOCK_SIZE = Choice((BLOCK_SIZE,) + tuple(b for b in BLOCK_SIZES if b != BLOCK_SIZE))
FUZZ_HEAD_DIM = Choice(tuple(sorted(HEAD_DIMS, key=lambda d: d != HEAD_DIM)))
"""The contract's block size and DeepSeek-V3.2's head dim first: the values a shrunk case keeps."""


ONE = call_sequences.ONE
CALLS = Choice((ONE,) + call_sequences.names())
ORDERS = ("short-first", "long-first")
PADDED_ZERO = ("the second call's K and Q tokens every fourth one zero, as a graph batch's "
               "padding tokens")
LENGTHS = ("random", "long", "short")
"""``lengths`` of the logits ops: ``random`` (the batch layouts), ``long`` (every context at
least half the budget), ``short`` (every context at most one block); with long or short the
key arrays keep one size whatever the lengths, as a run of calls needs."""


def _with(case: Case, **params) -> Case:
    return dataclasses.replace(case, params=tuple({**dict(case.params), **params}.items()))


def _lengths(spec: OpSpec, case: Case) -> str:
    lengths = spec.param(case, "lengths")
    if lengths not in LENGTHS:
        raise ValueError(f"{case.id}: unknown lengths {lengths!r}; choose one of "
                         f"{', '.join(LENGTHS)}")
    return lengths


def _logits_x_heads(values: dict) -> int:
    """The work of a logits case: every logit sums ``heads`` dot products."""
    return values["tokens"] * values["context"] * values["heads"]


def _decode_batch(values: dict) -> dict:
    """No more empty requests than requests; every context holds its drafts."""
    values = context_holds_drafts(values)
    return {**values, "empty_requests": min(values["empty_requests"], values["batch"])}


class QuantizeKSpec(OpSpec):
    op = "fp8_quantize_k"
    signature = contract("k", scale_fmt=None)
    outputs = ("values", "scale")
    output_dtypes = {"values": FP8, "scale": torch.float32}
    token_args = ("k",)
    case_params = {"scale_fmt": None, "data": "random", "head_dim": HEAD_DIM, "calls": ONE}
    input_space = InputSpace(VALUE_CELLS + QUANT_SIZES + (UE8M0,) + HEAD_DIM_CELLS
                             + call_sequences.cells(padding=PADDED_ZERO))
    fuzz_space = FuzzSpace({"tokens": FUZZ_TOKENS, "scale_fmt": Choice((None, "ue8m0")),
                            "data": FUZZ_DATA, "head_dim": FUZZ_HEAD_DIM, "calls": CALLS})

    def call_step(self, case: Case, step: Step) -> Case:
        """The padded call's tokens are ``zero-tokens`` (padding rows of a graph batch)."""
        case = super().call_step(case, step)
        return _with(case, data="zero-tokens") if step.padded else case

    def _make_inputs(self, case: Case) -> dict:
        k = _activations(case, 1, case.tokens, self.param(case, "head_dim"))
        if case.tokens >= 4 and self.param(case, "data") == "random":
            k[0] = 0
            k[1] *= 1e4
            k[2] *= 1e-5
            k[3] = 0
            k[3, :len(TIES)] = torch.tensor(TIES, device=k.device)
        return {"k": k, "scale_fmt": self.param(case, "scale_fmt")}

    def _reference(self, inputs):
        values, scale = ref.quantize_rows(inputs["k"], inputs["scale_fmt"])
        return {"values": values, "scale": scale}

    def compare(self, c: Comparison):
        return [_exact_row(n, c.outputs[n], c.expected[n], self.output_dtypes[n],
                           -1 if self.output_dtypes[n] == FP8 else None) for n in self.outputs]


class QuantizeQSpec(QuantizeKSpec):
    op = "fp8_quantize_q"
    signature = contract("q", "weights", "softmax_scale")
    outputs = ("values", "weights")
    output_dtypes = {"values": FP8, "weights": torch.float32}
    token_args = ("q", "weights")
    case_params = {"heads": HEADS, "data": "random", "head_dim": HEAD_DIM, "calls": ONE}
    layout_probe = (3, (("heads", 4),))
    small_params = (("heads", 4),)
    input_space = InputSpace(VALUE_CELLS + QUANT_SIZES + (
        Cell("sizes", "64 heads", "DeepSeek-V3.2's indexer heads", {"heads": 64},
             profiles=GPU_PROFILES, elsewhere="the CPU profile runs 4 heads"),) + HEAD_DIM_CELLS
        + call_sequences.cells(padding=PADDED_ZERO))
    fuzz_space = FuzzSpace({"tokens": FUZZ_TOKENS, "heads": FUZZ_HEADS, "data": FUZZ_DATA,
                            "head_dim": FUZZ_HEAD_DIM, "calls": CALLS})

    def case_elements(self, case: Case) -> int | None:
        return (case.tokens * self.param(case, "heads") * self.param(case, "head_dim")
                if case.tokens else None)

    def _make_inputs(self, case: Case) -> dict:
        heads, d = self.param(case, "heads"), self.param(case, "head_dim")
        q = _activations(case, 2, case.tokens, heads, d)
        w = torch.randn(case.tokens, heads, generator=generator(case, 3, case.device),
                        device=case.device)
        return {"q": q, "weights": w, "softmax_scale": d ** -0.5}

    def _reference(self, inputs):
        values, scale = ref.quantize_rows(inputs["q"], "ue8m0")
        c = float(inputs["softmax_scale"]) * inputs["q"].shape[1] ** -0.5
        return {"values": values, "weights": inputs["weights"] * scale * c}


BLOCK_BYTES = BLOCK_SIZE * (HEAD_DIM + SCALE_BYTES)


def far_block(block_size: int, head_dim: int) -> int:
    """The first block whose bytes lie past 2^31 from the cache's start (``far_blocks``)."""
    return 2 ** 31 // (block_size * (head_dim + SCALE_BYTES)) + 1


def _garbage_cache(case: Case, num_blocks: int, block_size: int, head_dim: int) -> torch.Tensor:
    g = generator(case, 9, case.device)
    return torch.randint(0, 256, (num_blocks, block_size, 1, head_dim + SCALE_BYTES),
                         generator=g, device=case.device, dtype=torch.uint8)


class QuantAndCacheSpec(OpSpec):
    """Writes through ``slot_mapping`` into a cache of garbage bytes: the whole cache must equal
    the reference's, so a write to a wrong slot, a -1 slot, or the wrong half of a block fails."""
    op = "indexer_k_quant_and_cache"
    signature = contract("k", "kv_cache", "slot_mapping", "quant_block_size", "scale_fmt")
    outputs = ("kv_cache",)
    output_dtypes = {"kv_cache": torch.uint8}
    token_args = ("k", "slot_mapping")
    written_args = ("kv_cache",)
    case_params = {"scale_fmt": None, "data": "random", "slots": "scattered",
                   "block_size": BLOCK_SIZE, "head_dim": HEAD_DIM, "calls": ONE}
    """``slots``: ``scattered`` (one token in eight unused, -1, anywhere) or ``runs`` (the first
    and last quarter of the batch -1: the padding tokens of a graph batch write nothing)."""
    input_space = InputSpace(VALUE_CELLS + QUANT_SIZES + (
        UE8M0,
        Cell("metadata", "-1 runs", "the first and last quarter of slot_mapping -1 (graph "
             "padding)", {"slots": "runs"}),
    ) + BLOCK_SIZE_CELLS + HEAD_DIM_CELLS + call_sequences.cells(
        padding="the second call's first and last quarter of slot_mapping -1 (tokens that "
        "wrote in the first call are padding)",
        dirty="the cache keeps what the previous calls wrote, and the reference starts there",
        reshuffled="slot_mapping redrawn every call"))
    fuzz_space = FuzzSpace({"tokens": FUZZ_TOKENS, "scale_fmt": Choice((None, "ue8m0")),
                            "data": FUZZ_DATA, "slots": Choice(("scattered", "runs")),
                            "block_size": FUZZ_BLOCK_SIZE, "head_dim": FUZZ_HEAD_DIM,
                            "calls": CALLS})

    def call_step(self, case: Case, step: Step) -> Case:
        case = super().call_step(case, step)
        return _with(case, slots="runs") if step.padded else case
    reference_extras = ref.KV_LAYOUTS
    """The cache as each layout an implementation may declare (``kv_layout``) writes it."""

    def _make_inputs(self, case: Case) -> dict:
        t, bs, d = case.tokens, self.param(case, "block_size"), self.param(case, "head_dim")
        num_blocks = t // bs + 3
        g = generator(case, 4, case.device)
        slots = torch.randperm(num_blocks * bs, generator=g, device=case.device)[:t]
        if self.param(case, "slots") == "runs":
            slots[:max(1, t // 4)] = -1
            slots[t - t // 4:] = -1
        elif t >= 4:
            slots[torch.randperm(t, generator=g, device=case.device)[:max(1, t // 8)]] = -1
        return {"k": _activations(case, 5, t, d), "kv_cache": _garbage_cache(case, num_blocks, bs, d),
                "slot_mapping": slots.long(), "quant_block_size": d,
                "scale_fmt": self.param(case, "scale_fmt")}

    def prepare(self, inputs):
        return {**inputs, "kv_cache": inputs["kv_cache"].clone()}

    def collect(self, call, result):
        if result is not None and not isinstance(result, torch.Tensor):
            raise ContractViolation(f"{self.op} writes in place and returns None, got {type(result)}")
        return {"kv_cache": call["kv_cache"]}

    def reference(self, inputs):
        caches = {}
        for layout in ref.KV_LAYOUTS:
            caches[layout] = inputs["kv_cache"].clone()
            ref.write_cache(inputs["k"], caches[layout], inputs["slot_mapping"],
                            inputs["scale_fmt"], layout)
        return {"kv_cache": caches["normal"], **caches}

    def compare(self, c: Comparison):
        """A writer that declares ``kv_layout`` is judged on that layout's bytes; one that
        declares ``fp32_division: approximate`` by APPROXIMATE_DIVISION."""
        layout = c.declared("kv_layout", "normal")
        if layout not in ref.KV_LAYOUTS:
            return [{"output": "kv_cache", "passed": False, "detail": f"declared K-cache layout "
                     f"{layout!r} is unknown; the harness knows {', '.join(ref.KV_LAYOUTS)}"}]
        cache = c.inputs["kv_cache"]
        row = cache_row(c.outputs["kv_cache"], c.expected[layout],
                        cache.shape[1] * c.inputs["k"].shape[1], c.declared("fp32_division", "exact"))
        return [{**row, "layout": layout}]


def quantized_q(case: Case, rows: int, heads: int, head_dim: int = HEAD_DIM):
    q = _activations(case, 6, rows, heads, head_dim)
    w = torch.randn(rows, heads, generator=generator(case, 7, case.device), device=case.device)
    values, scale = ref.quantize_rows(q, "ue8m0")
    return values, w * scale * (head_dim ** -0.5 * heads ** -0.5)


class MqaLogitsSpec(OpSpec):
    op = "fp8_mqa_logits"
    signature = contract("q", "kv", "weights", "cu_seqlen_ks", "cu_seqlen_ke")
    outputs = ("logits",)
    output_dtypes = {"logits": torch.float32}
    token_args = ("q", "weights", "cu_seqlen_ks", "cu_seqlen_ke")
    case_params = {"heads": HEADS, "seqs": 1, "context": 1024, "data": "random",
                   "head_dim": HEAD_DIM, "sparse_rows": False, "lengths": "random",
                   "calls": ONE}
    call_orders = ORDERS
    small_params = (("heads", 4), ("context", 300))
    """``sparse_rows``: one sequence with exactly ``context`` cached keys, of whose query rows only
    the first and last two see keys (the others' windows are empty, every logit -inf): a logits
    tensor past 2^31 elements whose float64 truth stays a few rows (SPARSE_TRUTH_FROM)."""
    layout_probe = (3, (("heads", 4), ("seqs", 2), ("context", 100)))
    input_space = InputSpace(VALUE_CELLS + (
        Cell("sizes", "<= 64 query rows", "small prefill chunks", {"tokens": between(1, 64)}),
        Cell("sizes", "> 64 query rows", "prefill chunks of hundreds to 16384 queries",
             {"tokens": at_least(65)}),
        Cell("sizes", "> 4096 keys", "past 4096 keys, ending in a partial block of 128",
             {"context": at_least(4097)}),
        Cell("sizes", "64 heads", "DeepSeek-V3.2's indexer heads", {"heads": 64},
             profiles=GPU_PROFILES, elsewhere="the CPU profile runs 4 heads"),
        Cell("metadata", "ragged batch", "several sequences, each query seeing its own "
             "sequence's keys", {"seqs": at_least(2)}),
        Cell("sizes", "logits past 2^31 elements", "M x N > 2^31 logits (32769 queries x 65537 "
             "keys, 8.6 GB): a 32-bit output offset (row * N) wraps in the last rows",
             where=lambda v: (v.get("tokens") or 0) * (v.get("context", 0) + (v.get("tokens") or 0))
             > 2 ** 31 and v.get("sparse_rows"), profiles=NIGHTLY_PROFILES,
             elsewhere=OUTPUT_PAST_2_31_ELSEWHERE),
    ) + HEAD_DIM_CELLS + call_sequences.cells(ORDERS))
    fuzz_space = FuzzSpace({"tokens": Sizes(1, 16384, edges=(1, 2, 63, 64, 65, 129, 16384)),
                            "heads": FUZZ_HEADS, "seqs": Sizes(1, 8), "context": FUZZ_CONTEXT,
                            "data": FUZZ_DATA, "head_dim": FUZZ_HEAD_DIM,
                            "sparse_rows": flag(on_cpu=False), "lengths": Choice(LENGTHS),
                            "calls": Choice((ONE,) + call_sequences.names(ORDERS))},
                           shrink_to_fit=("tokens", "context"),
                           cost=_logits_x_heads)

    def call_step(self, case: Case, step: Step) -> Case:
        return _with(super().call_step(case, step), lengths=step.lengths)

    def case_elements(self, case: Case) -> int | None:
        """Query rows x context: the logits (and a torch implementation's per-head scores,
        heads times that) are what fill the memory (``sparse_rows``: x context + rows keys)."""
        keys = self.param(case, "context") + (case.tokens if self.param(case, "sparse_rows") else 0)
        return case.tokens * max(keys, 1) if case.tokens else None
    reference_extras = ("bound", "live_rows")
    """``bound``: ``sum_h |w| sum_d |q k| * k_scale`` per logit (float64), the scale of its
    rounding. ``live_rows``: where the logits have SPARSE_TRUTH_FROM elements or more, the rows
    that see any key; ``logits`` and ``bound`` then hold those rows only, and every other row
    must be all -inf."""

    def _make_inputs(self, case: Case) -> dict:
        heads, d = self.param(case, "heads"), self.param(case, "head_dim")
        if self.param(case, "sparse_rows"):
            starts, ends, num_keys = _sparse_windows(case.tokens, self.param(case, "context"))
        else:
            seqs, n, lengths = self.param(case, "seqs"), self.param(case, "context"), _lengths(self, case)
            budget = n // max(1, min(seqs, case.tokens))
            contexts = None if lengths == "random" else (budget if lengths == "long" else 0)
            batch = ragged_prefill(case.tokens, seqs, n, generator(case, 8), contexts)
            starts, ends, num_keys = batch.starts, batch.ends, batch.num_keys
            if contexts is not None:  # one key array for long and short: the same shapes
                num_keys = budget * min(seqs, case.tokens) + case.tokens
        k = _activations(case, 10, max(num_keys, 1), d)
        k_fp8, k_scale = ref.quantize_rows(k, None)
        q, w = quantized_q(case, case.tokens, heads, d)
        return {"q": q, "kv": (k_fp8, k_scale), "weights": w,
                "cu_seqlen_ks": starts.to(case.device), "cu_seqlen_ke": ends.to(case.device)}


    def reference(self, inputs):
        args = (inputs["q"], inputs["kv"][0], inputs["kv"][1], inputs["weights"],
                inputs["cu_seqlen_ks"], inputs["cu_seqlen_ke"])
        if args[0].shape[0] * args[1].shape[0] < SPARSE_TRUTH_FROM:
            return {"logits": _f64_logits(*args), "bound": ref.mqa_bound(*args)}
        live = (args[5] > args[4]).nonzero().reshape(-1)
        args = (args[0][live], *args[1:3], args[3][live], args[4][live], args[5][live])
        return {"logits": _f64_logits(*args), "bound": ref.mqa_bound(*args), "live_rows": live}

    def compare(self, c: Comparison):
        """Within the declared accumulation class's bound; an implementation that declares
        ``outside_window: unwritten`` is not judged outside the windows."""
        logits, expect = c.outputs["logits"], c.expected
        outside = c.declared("outside_window", "-inf")
        if outside not in ("-inf", "unwritten"):
            return [{"output": "logits", "passed": False, "detail": f"unknown declared "
                     f"outside_window {outside!r}; declare '-inf' or 'unwritten'"}]
        if "live_rows" in expect:
            return [_sparse_logits_row(c, outside)]
        if outside == "unwritten" and logits.shape == expect["logits"].shape:
            logits = logits.masked_fill(torch.isneginf(expect["logits"]), float("-inf"))
        dims = (c.inputs["q"].shape[-1], c.inputs["q"].shape[-2])
        row = logits_row(logits, expect["logits"], expect["bound"], dims, c.accumulation)
        if outside != "-inf":
            row["outside_window"] = f"not judged (declared {outside})"
        return [row]


SPARSE_TRUTH_FROM = 2 ** 30
"""Logits of this many elements or more get a float64 truth of their rows that see any key only
(``live_rows``): a dense one would take 17 GB per 2^31 logits, twice (values and bounds)."""


def _sparse_windows(rows: int, context: int):
    """(ks, ke, keys) of one causal sequence of ``rows`` queries after ``context`` cached keys,
    in which only the first and last two queries see keys (the rest: empty windows)."""
    ks = torch.zeros(rows, dtype=torch.int32)
    ke = torch.zeros(rows, dtype=torch.int32)
    live = torch.tensor(sorted({0, 1, rows - 2, rows - 1} & set(range(rows))), dtype=torch.long)
    ke[live] = (context + live + 1).int()
    return ks, ke, context + rows


def _sparse_logits_row(c: Comparison, outside: str) -> dict:
    """Logits judged against a truth of their live rows (``live_rows``): those rows within the
    accumulation bound, every other row all -inf (unless the implementation declares
    ``outside_window: unwritten``), counted in chunks so no float64 copy is made."""
    logits, expect = c.outputs["logits"], c.expected
    live = expect["live_rows"].to(logits.device)
    q = c.inputs["q"]
    rows = q.shape[0] * (q.shape[1] if q.dim() == 4 else 1)
    width = expect["logits"].shape[1]
    if tuple(logits.shape) != (rows, width) or logits.dtype != torch.float32:
        return {"output": "logits", "passed": False, "shape": tuple(logits.shape),
                "detail": f"got {logits.dtype} {tuple(logits.shape)}, contract float32 "
                          f"{(rows, width)}"}
    got = logits[live]
    if outside == "unwritten":
        got = got.masked_fill(torch.isneginf(expect["logits"]), float("-inf"))
    dims = (q.shape[-1], q.shape[-2])
    row = logits_row(got, expect["logits"], expect["bound"], dims, c.accumulation)
    idle = torch.ones(rows, dtype=torch.bool, device=logits.device)
    idle[live] = False
    not_inf = 0
    if outside == "-inf":
        step = max(1, 2 ** 28 // max(width, 1))
        for r0 in range(0, rows, step):
            part = logits[r0:r0 + step][idle[r0:r0 + step]]
            not_inf += int((~torch.isneginf(part)).sum())
    row = {**row, "shape": tuple(logits.shape), "live_rows": int(live.numel()),
           "idle_not_inf": not_inf}
    if not_inf:
        row.update(passed=False, detail="; ".join(filter(None, [
            row["detail"], f"{not_inf} logits of rows that see no key are not -inf"])))
    return row


def _f64_logits(q, k, k_scale, weights, ks, ke) -> torch.Tensor:
    """float64 logits (the float32 result of the registered op would round the ground truth)."""
    return ref.mqa_logits(q, k, k_scale, weights, ks, ke, torch.float64)


class PagedMqaLogitsSpec(MqaLogitsSpec):
    op = "fp8_paged_mqa_logits"
    signature = contract("q", "kv_cache", "weights", "context_lens", "block_tables",
                         "max_model_len")
    token_args = ()
    contiguous_args = ("kv_cache",)
    layout_probe = (3, (("heads", 4), ("context", 200)))
    case_params = {"heads": HEADS, "next_n": 1, "batch": 0, "context": 2048, "shuffled": True,
                   "capacity": False, "data": "random", "empty_requests": 0,
                   "shared_prefix": False, "far_blocks": False, "block_size": BLOCK_SIZE,
                   "head_dim": HEAD_DIM, "sparse_rows": False, "lengths": "random",
                   "calls": ONE}
    """Beside the prefill ones: ``empty_requests``, the last N requests have no context
    (context_len 0: every logit of theirs -inf); ``shared_prefix``, every request's first blocks
    are request 0's (prefix caching: one physical block in several tables); ``far_blocks``, the
    cache is larger than 2^31 bytes and the requests' blocks lie past that offset (a 32-bit
    byte offset wraps); ``sparse_rows``, only the first request (a few keys) and the last (the
    whole ``context``) have context, the others none: a logits tensor past 2^31 elements whose
    float64 truth stays a few rows."""
    input_space = InputSpace(VALUE_CELLS + (
        Cell("sizes", "context <= 8192", "short and medium contexts", {"context": between(1, 8192)}),
        Cell("sizes", "context >= 65536", "long contexts (65536, 131072)",
             {"context": at_least(65536)}, profiles=GPU_PROFILES,
             elsewhere="long contexts: run on a GPU (the CPU profile's contexts are 300 keys)"),
        Cell("sizes", "batch >= 64", "large decode batches", {"batch": at_least(64)},
             profiles=GPU_PROFILES, elsewhere="the CPU profile runs batches of 1-3"),
        Cell("sizes", "cache past 2^31 bytes", "blocks at byte offsets past 2^31 of a 2.1 GB cache",
             {"far_blocks": True}, profiles=GPU_PROFILES,
             elsewhere="a 2.1 GB cache per case: run on a GPU"),
        Cell("sizes", "logits past 2^31 elements", "B x next_n x max_model_len > 2^31 logits "
             "(8193 x 2 x 131072, 8.6 GB): a 32-bit output offset (row * max_model_len) wraps "
             "in the last request's rows (ROCm/aiter #4244)",
             where=lambda v: v.get("batch", 0) * v.get("next_n", 1) * v.get("context", 0)
             > 2 ** 31, profiles=NIGHTLY_PROFILES,
             elsewhere=OUTPUT_PAST_2_31_ELSEWHERE),
        Cell("metadata", "next_n > 1", "speculative drafts, each seeing one more key",
             {"next_n": at_least(2)}),
        Cell("metadata", "next_n not a power of two", "3 drafts: rows laid out by tl.arange need "
             "padding to a power of two (found by harness fuzz)", {"next_n": 3}),
        Cell("metadata", "shuffled block table", "blocks in random order, garbage in unused "
             "slots and spare blocks", {"shuffled": True}),
        Cell("metadata", "empty context", "requests with context_len 0", {"empty_requests": at_least(1)}),
        Cell("metadata", "shared blocks", "requests sharing prefix blocks (prefix caching)",
             {"shared_prefix": True}),
        Cell("metadata", "graph-sized buffers", "cache and tables sized for max_model_len, as a "
             "captured decode graph's", {"capacity": True}, profiles=GPU_PROFILES,
             elsewhere="the CUDA-graph suite builds them; it needs a GPU"),
    ) + BLOCK_SIZE_CELLS + HEAD_DIM_CELLS + call_sequences.cells(
        ORDERS, padding="the short calls give half the requests context 0 (requests that had "
        "keys are padding)", reshuffled="block tables and the blocks' places in the cache "
        "redrawn every call"))
    replay_params = (("capacity", True),)
    call_orders = ORDERS
    small_params = (("heads", 4), ("context", 300))
    fuzz_space = FuzzSpace({"batch": Sizes(1, 16385, edges=(1, 2, 3, 64, 8193, 16385)),
                            "next_n": Sizes(1, 4),
                            "heads": FUZZ_HEADS, "context": FUZZ_CONTEXT, "data": FUZZ_DATA,
                            "shuffled": Choice((True, False)), "capacity": flag(),
                            "empty_requests": Sizes(0, 3), "shared_prefix": flag(),
                            "far_blocks": flag(on_cpu=False), "block_size": FUZZ_BLOCK_SIZE,
                            "head_dim": FUZZ_HEAD_DIM, "sparse_rows": flag(on_cpu=False),
                            "lengths": Choice(LENGTHS),
                            "calls": Choice((ONE,) + call_sequences.names(ORDERS))},
                           requests="batch", shrink_to_fit=("batch", "context"),
                           adjust=_decode_batch, cost=_logits_x_heads)

    def case_elements(self, case: Case) -> int | None:
        rows = case.tokens or self.param(case, "batch") * self.param(case, "next_n")
        return rows * max(self.param(case, "context"), 1) if rows else None

    def token_count(self, inputs) -> int:
        return inputs["q"].shape[0] * inputs["q"].shape[1]

    def _make_inputs(self, case: Case) -> dict:
        next_n, heads = self.param(case, "next_n"), self.param(case, "heads")
        bs, d = self.param(case, "block_size"), self.param(case, "head_dim")
        if case.tokens % next_n:
            raise ValueError(f"{case.id}: decode rows {case.tokens} must be a multiple of next_n={next_n}")
        batch, n = case.tokens // next_n, self.param(case, "context")
        g = generator(case, 11)
        lens = decode_seq_lens(batch, next_n, n, g, _lengths(self, case), bs)
        empty = min(self.param(case, "empty_requests"), batch)
        if empty:
            lens[batch - empty:] = 0
        if self.param(case, "sparse_rows") and batch > 1:
            lens[1:-1] = 0
            lens[-1] = n
        need = [(int(x) + bs - 1) // bs for x in lens]
        donor = max(range(batch), key=lambda b: need[b]) if batch else 0
        shared = [min(nb, need[donor]) // 2 if self.param(case, "shared_prefix") and b != donor
                  else 0 for b, nb in enumerate(need)]
        max_blocks = (n + bs - 1) // bs
        # ``capacity``: the cache holds max_model_len for every request, as vLLM sizes the
        # buffers a decode graph is captured with, so every seed has the same shapes
        total = (batch * max_blocks if self.param(case, "capacity") else sum(need)) + 3
        first = far_block(bs, d) if self.param(case, "far_blocks") else 0
        order = (torch.randperm(total, generator=g) if self.param(case, "shuffled")
                 else torch.arange(total)) + first
        tables = torch.randint(0, total, (batch, max_blocks), generator=g, dtype=torch.int32) + first
        used = 0
        for b in [donor] + [b for b in range(batch) if b != donor]:
            tables[b, :shared[b]] = tables[donor, :shared[b]]
            tables[b, shared[b]:need[b]] = order[used:used + need[b] - shared[b]].int()
            used += need[b] - shared[b]
        cache = _garbage_cache(case, total + first, bs, d)
        for b in range(batch):
            length = int(lens[b])
            if length <= shared[b] * bs:
                continue
            pos = torch.arange(shared[b] * bs, length)
            slots = (tables[b].long()[pos // bs] * bs + pos % bs).to(case.device)
            keys = _activations(case, 100 + b, length, d)[shared[b] * bs:]
            ref.indexer_k_quant_and_cache(keys, cache, slots, d, None)
        q, w = quantized_q(case, case.tokens, heads, d)
        return {"q": q.view(batch, next_n, heads, d), "kv_cache": cache, "weights": w,
                "context_lens": lens.to(case.device), "block_tables": tables.to(case.device),
                "max_model_len": max_blocks * bs}

    def call_step(self, case: Case, step: Step) -> Case:
        """Half the requests have context 0 in the padded calls, none in the others."""
        case = super().call_step(case, step)
        batch = case.tokens // self.param(case, "next_n") or self.param(case, "batch")
        return _with(case, lengths=step.lengths,
                     empty_requests=max(1, batch // 2) if step.padded else 0)

    def reference(self, inputs):
        q, cache, w = inputs["q"], inputs["kv_cache"], inputs["weights"]
        b, next_n, _, d = q.shape
        lens = inputs["context_lens"].cpu()
        requests = list(range(b))
        sparse = b * next_n * inputs["max_model_len"] >= SPARSE_TRUTH_FROM
        if sparse:
            requests = [int(i) for i in (lens > 0).nonzero().reshape(-1)]
        out = torch.full((len(requests) * next_n, inputs["max_model_len"]), float("-inf"),
                         dtype=torch.float64, device=q.device)
        bound = torch.zeros_like(out)
        positions = ref.paged_positions(inputs["context_lens"], next_n)
        for slot, i in enumerate(requests):
            length = int(lens[i])
            if length <= 0:
                continue
            k, scale = ref.gather_paged_keys(cache, inputs["block_tables"], i, length, d,
                                             cache.shape[1])
            rows = slice(i * next_n, (i + 1) * next_n)
            into = slice(slot * next_n, (slot + 1) * next_n)
            ke = (positions[rows] + 1).clamp(0, length).int()
            args = (q[i], k, scale, w[rows], torch.zeros_like(ke), ke)
            out[into, :length] = _f64_logits(*args)
            bound[into, :length] = ref.mqa_bound(*args)
        if not sparse:
            return {"logits": out, "bound": bound}
        live = torch.tensor([i * next_n + j for i in requests for j in range(next_n)],
                            dtype=torch.long)
        return {"logits": out, "bound": bound, "live_rows": live}


for _spec in (QuantizeKSpec(), QuantizeQSpec(), QuantAndCacheSpec(), MqaLogitsSpec(),
              PagedMqaLogitsSpec()):
    register_spec(_spec)

