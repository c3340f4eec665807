"""Error metrics of one output tensor against its float64 reference."""

from __future__ import annotations

import math

import torch

from harness.core.tolerances import Tolerance

_ULP_DTYPES = (torch.bfloat16, torch.float16)


def _ordered_bits(t: torch.Tensor) -> torch.Tensor:
    """Map bf16/fp16 bit patterns to integers whose difference is the distance in ulps."""
    bits = t.view(torch.int16).to(torch.int32)
    return torch.where(bits < 0, -(bits & 0x7FFF), bits)


COUNT_CHUNK = 2 ** 28
"""Elements compared at once: compared whole, a tensor of billions of bytes makes temporaries
(the mask, an int64 sum) of many times its size: 73 GiB for a 9.8 GB tensor
(docs/kernels/harness_core.md)."""


def differing_bytes(a: torch.Tensor, b: torch.Tensor) -> int:
    """How many bytes of two same-shape tensors differ (NaN payloads and -0.0 included), counted
    in chunks so that tensors of billions of bytes need no mask of their size."""
    x, y = a.detach().contiguous().view(-1), b.detach().to(a.device).contiguous().view(-1)
    if x.dtype != torch.bool:
        x, y = x.view(torch.uint8), y.view(torch.uint8)
    return sum(int(torch.count_nonzero(x[i:i + COUNT_CHUNK] != y[i:i + COUNT_CHUNK]))
               for i in range(0, x.numel(), COUNT_CHUNK))


def ulp_distance(out: torch.Tensor, ref: torch.Tensor) -> torch.Tensor:
    """Distance in ulps of ``out`` from ``ref`` rounded to ``out``'s dtype (bf16/fp16 only).
    Meaningful within one binade of the reference (see :func:`within_binade`): across zero it
    counts every representable value in between (a sign flip of 1e-30 reads as ~30,000)."""
    return (_ordered_bits(out) - _ordered_bits(ref.to(out.dtype))).abs()


def within_binade(out: torch.Tensor, ref: torch.Tensor) -> torch.Tensor:
    """Where an ulp count means "this many roundings off": ``out`` equals the reference rounded
    to its dtype, or has its sign and lies within a factor of two of it."""
    return _within_binade(out.double(), ref.to(out.dtype).double())


def _within_binade(o: torch.Tensor, r: torch.Tensor) -> torch.Tensor:
    """:func:`within_binade` of ``o`` and the reference already rounded to ``o``'s dtype, both
    in a floating type that holds them exactly."""
    o_abs, r_abs = o.abs(), r.abs()
    half_o, half_r = o_abs * 0.5, r_abs * 0.5  # halved, not doubled: 2|o| overflows float32
    near = (torch.sign(o) == torch.sign(r)) & (half_o <= r_abs) & (half_r <= o_abs)
    return near | (o == r)


CHUNK_ELEMENTS = 1 << 25
"""Elements compared at once: the float64 temporaries of a 65536-token mhc_post output would
otherwise need tens of GB of GPU memory."""


def compare(out: torch.Tensor, ref: torch.Tensor, tol: Tolerance,
            expected_dtype: torch.dtype | None = None) -> dict:
    """Metrics and a pass/fail for ``out`` against ``ref`` (same shape; float64, or float32 for
    16-bit outputs, see OpSpec.stored_truth).

    Fails closed: a shape or dtype different from the contract, any NaN in ``out``, or a
    non-finite value where the reference has a different one (e.g. a missing ``-inf`` mask
    entry) fails, whatever the tolerance.
    """
    row: dict = {"shape": tuple(out.shape), "dtype": str(out.dtype).replace("torch.", ""),
                 "atol": tol.atol, "rtol": tol.rtol}
    problems = []
    if tuple(out.shape) != tuple(ref.shape):
        problems.append(f"shape {tuple(out.shape)} != contract {tuple(ref.shape)}")
    if expected_dtype is not None and out.dtype != expected_dtype:
        problems.append(f"dtype {out.dtype} != contract {expected_dtype}")
    if problems:
        row.update(passed=False, detail="; ".join(problems), numel=out.numel())
        return row

    tokens = out.shape[0] if out.dim() else 1
    acc = _Accumulator(tol, ulps=out.dtype in _ULP_DTYPES, tokens=tokens,
                       per_token=max(out.numel() // max(tokens, 1), 1))
    flat_out = out.detach().reshape(-1)
    flat_ref = ref.detach().reshape(-1).to(out.device)
    for start in range(0, flat_out.numel(), CHUNK_ELEMENTS):
        acc.add(flat_out[start:start + CHUNK_ELEMENTS], flat_ref[start:start + CHUNK_ELEMENTS],
                start)
    numel = max(out.numel(), 1)
    row.update(numel=out.numel(), max_abs=acc.max_abs,
               mean_abs=acc.sum_abs / acc.finite if acc.finite else 0.0, max_rel=acc.max_rel,
               mismatch_frac=acc.mismatches / numel, nan_count=acc.nan_count,
               nonfinite_mismatch=acc.nonfinite_mismatch, cosine=acc.cosine())
    if acc.ulps:
        row["max_ulp"] = acc.max_ulp
        row["beyond_binade"] = acc.far_from_binade
    row["tol_used"] = acc.tol_used
    if acc.worst_index >= 0 and out.dim() and out.shape[0]:
        row["worst_token"], row["worst_column"] = divmod(acc.worst_index, acc.per_token)
    row["tokens_beyond"] = int(acc.bad_tokens.sum())
    failed = []
    if acc.nan_count:
        failed.append(f"{acc.nan_count} NaN")
    if acc.nonfinite_mismatch:
        failed.append(f"{acc.nonfinite_mismatch} non-finite values differ from the reference")
    if acc.mismatches:
        where = (f" at token {row['worst_token']}, element {row['worst_column']}"
                 if "worst_token" in row else "")
        spread = f" in {row['tokens_beyond']} of {tokens} tokens" if out.dim() else ""
        ulps = ""
        if acc.ulps:
            ulps = f"; max {acc.max_ulp} ulp of {str(out.dtype).removeprefix('torch.')}"
            if acc.far_from_binade:
                ulps += (f" where within a binade of the reference, {acc.far_from_binade} "
                         f"further (sign or scale off: max abs {acc.far_max_abs:.3g})")
        failed.append(f"{acc.mismatches}/{numel} elements{spread} beyond atol={tol.atol:g} "
                      f"rtol={tol.rtol:g} (max abs {acc.max_abs:.3g}; worst {acc.tol_used:.3g}x "
                      f"the tolerance{where}{ulps})")
    row["passed"] = not failed
    row["detail"] = "; ".join(failed)
    return row


class _Accumulator:
    """Running metrics over chunks of a flattened output."""

    def __init__(self, tol: Tolerance, ulps: bool, tokens: int = 1, per_token: int = 1) -> None:
        self.tol, self.ulps, self.per_token = tol, ulps, per_token
        self.bad_tokens = torch.zeros(max(tokens, 1), dtype=torch.bool)
        """Tokens (dim 0) with at least one element beyond the tolerance."""
        self.max_abs = self.sum_abs = self.max_rel = 0.0
        self.finite = self.mismatches = self.nan_count = self.nonfinite_mismatch = 0
        self.max_ulp = 0
        self.far_from_binade, self.far_max_abs = 0, 0.0
        """Elements outside one binade of the reference: not counted in ulps (see within_binade)."""
        self.tol_used, self.worst_index = 0.0, -1
        """Largest |err| / (atol + rtol |ref|) (1.0 = at the limit) and its flat index."""
        self.dot = self.norm_o = self.norm_r = 0.0

    def add(self, out: torch.Tensor, ref: torch.Tensor, start: int = 0) -> None:
        """One chunk. Where every element of both is finite (the common case: a finite sum of
        the errors says so) nothing is masked or gathered, and the ulp checks run in float32,
        which holds 16-bit values exactly: on a CPU these passes cost more than the metrics."""
        o = out.double()
        r = ref.double()
        err = (o - r).abs_()
        total = float(err.sum())
        where = None
        if not math.isfinite(total):
            both = torch.isfinite(o) & torch.isfinite(r)
            self.nan_count += int(torch.isnan(o).sum())
            self.nonfinite_mismatch += int((~both & ~((o == r) & ~torch.isfinite(r))).sum())
            where = both.nonzero().flatten()
            o, r, err = o[where], r[where], err[where]
            total = float(err.sum())
        if not o.numel():
            return
        self.finite += o.numel()
        self.max_abs = max(self.max_abs, float(err.max()))
        self.sum_abs += total
        ref_abs = r.abs()
        allowed = ref_abs.mul(self.tol.rtol).add_(self.tol.atol)
        beyond = err > allowed
        mismatches = int(beyond.sum())
        self.mismatches += mismatches
        if mismatches:
            flat = beyond.nonzero().flatten()
            flat = (flat if where is None else where[flat]) + start
            self.bad_tokens[(flat // self.per_token).clamp_max(len(self.bad_tokens) - 1).cpu()] = True
        share = err / allowed.clamp_min_(1e-300)
        worst = int(share.argmax())
        if float(share[worst]) > self.tol_used:
            self.tol_used = float(share[worst])
            self.worst_index = start + (worst if where is None else int(where[worst]))
        rel = err.div(ref_abs).masked_fill_(ref_abs <= self.tol.atol, 0.0)
        self.max_rel = max(self.max_rel, float(rel.max()))
        self.dot += float(o @ r)
        self.norm_o += float(o @ o)
        self.norm_r += float(r @ r)
        if self.ulps:
            o16 = out if where is None else out[where]
            r16 = (ref if where is None else ref[where]).to(out.dtype)
            near = _within_binade(o16.float(), r16.float())
            if bool(near.any()):
                ulps = (_ordered_bits(o16) - _ordered_bits(r16)).abs_()
                self.max_ulp = max(self.max_ulp, int(ulps.masked_fill_(~near, 0).max()))
            far_count = near.numel() - int(near.sum())
            if far_count:
                self.far_from_binade += far_count
                self.far_max_abs = max(self.far_max_abs,
                                       float(err.masked_fill(near, 0.0).max()))

    def cosine(self) -> float:
        if self.norm_o == 0 or self.norm_r == 0:
            return 1.0 if self.norm_o == self.norm_r else 0.0
        return self.dot / (self.norm_o ** 0.5 * self.norm_r ** 0.5)


def misrounded(out: torch.Tensor, ref: torch.Tensor) -> tuple[int, int]:
    """How many of a bf16/fp16 ``out``'s elements differ from ``ref`` rounded to that dtype, and
    of how many: an fp32 computation rounded once leaves almost none (those whose fp32 value
    lies within its own error of a rounding boundary), a 16-bit intermediate about a fifth."""
    flat_out, flat_ref = out.detach().reshape(-1), ref.detach().reshape(-1)
    count = 0
    for start in range(0, flat_out.numel(), CHUNK_ELEMENTS):
        o = flat_out[start:start + CHUNK_ELEMENTS]
        r = flat_ref[start:start + CHUNK_ELEMENTS].to(o.device)
        count += int((ulp_distance(o, r)[torch.isfinite(r)] > 0).sum())
    return count, flat_out.numel()


def per_token_error(out: torch.Tensor, ref: torch.Tensor) -> torch.Tensor:
    """Each token's (dim 0) max abs error divided by its max |reference|: [T] float64.

    Normalising per token keeps tokens of very different scale comparable; taking statistics of
    this over tokens (not the raw max) keeps the expected growth of a maximum with T out.
    """
    t = out.shape[0]
    per_row = max(out[0].numel(), 1) if t else 1
    step = max(CHUNK_ELEMENTS // per_row, 1)
    parts = []
    for start in range(0, t, step):
        o = out[start:start + step].detach().double().reshape(-1, per_row)
        r = ref[start:start + step].detach().to(o.device, torch.float64).reshape(-1, per_row)
        finite = torch.isfinite(r) & torch.isfinite(o)
        zero = torch.zeros((), dtype=o.dtype, device=o.device)
        err = torch.where(finite, (o - r).abs(), zero).amax(dim=1)
        scale = torch.where(finite, r.abs(), zero).amax(dim=1)
        parts.append((err / scale.clamp_min(torch.finfo(torch.float32).tiny)).cpu())
    return torch.cat(parts) if parts else torch.zeros(0, dtype=torch.float64)


_INT_OF_SIZE = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def _bits(t: torch.Tensor) -> torch.Tensor:
    t = t.detach().contiguous()
    return t.view(_INT_OF_SIZE[t.element_size()]) if t.dtype.is_floating_point else t


def differing_tokens(a: torch.Tensor, b: torch.Tensor) -> list[int]:
    """Indices along dim 0 whose bits differ (``[0]`` for differing scalars or shapes)."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return [0]
    x, y = _bits(a), _bits(b)
    if x.dim() == 0:
        return [] if bool(x == y) else [0]
    return (x != y).reshape(x.shape[0], -1).any(1).nonzero().flatten().tolist()
