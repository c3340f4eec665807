"""How the sparse-attention indexer's outputs are judged against the float64 reference:

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

import torch

from harness.core.specs import Comparison


U32 = 2.0 ** -24


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
