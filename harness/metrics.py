"""Error metrics of one output tensor against its float64 reference."""

from __future__ import annotations

import torch

from harness.tolerances import Tolerance

_ULP_DTYPES = (torch.bfloat16, torch.float16)


def _ordered_bits(t: torch.Tensor) -> torch.Tensor:
    """Map bf16/fp16 bit patterns to integers whose difference is the distance in ulps."""
    bits = t.view(torch.int16).to(torch.int32)
    return torch.where(bits < 0, -(bits & 0x7FFF), bits)


def ulp_distance(out: torch.Tensor, ref: torch.Tensor) -> torch.Tensor:
    """Distance in ulps of ``out`` from ``ref`` rounded to ``out``'s dtype (bf16/fp16 only)."""
    return (_ordered_bits(out) - _ordered_bits(ref.to(out.dtype))).abs()


def compare(out: torch.Tensor, ref: torch.Tensor, tol: Tolerance,
            expected_dtype: torch.dtype | None = None) -> dict:
    """Metrics and a pass/fail for ``out`` against ``ref`` (float64, same shape).

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

    o = out.detach().to("cpu", torch.float64) if out.device != ref.device else out.detach().double()
    r = ref.detach().to(o.device, torch.float64)
    nan_count = int(torch.isnan(o).sum())
    ref_nonfinite = ~torch.isfinite(r)
    out_nonfinite = ~torch.isfinite(o)
    nonfinite_mismatch = int(((ref_nonfinite | out_nonfinite) & ~((o == r) & ref_nonfinite)).sum())
    both = ~(ref_nonfinite | out_nonfinite)
    of, rf = o[both], r[both]
    err = (of - rf).abs()
    bound = tol.atol + tol.rtol * rf.abs()
    mismatches = int((err > bound).sum())
    numel = max(out.numel(), 1)
    significant = rf.abs() > tol.atol
    row.update(
        numel=out.numel(),
        max_abs=float(err.max()) if err.numel() else 0.0,
        mean_abs=float(err.mean()) if err.numel() else 0.0,
        max_rel=float((err[significant] / rf[significant].abs()).max()) if significant.any() else 0.0,
        mismatch_frac=mismatches / numel,
        nan_count=nan_count,
        nonfinite_mismatch=nonfinite_mismatch,
        cosine=_cosine(of, rf),
    )
    if out.dtype in _ULP_DTYPES and err.numel():
        row["max_ulp"] = int(ulp_distance(out.detach()[both.to(out.device)],
                                          ref.detach()[both.to(ref.device)].to(out.device)).max())
    failed = []
    if nan_count:
        failed.append(f"{nan_count} NaN")
    if nonfinite_mismatch:
        failed.append(f"{nonfinite_mismatch} non-finite values differ from the reference")
    if mismatches:
        failed.append(f"{mismatches}/{numel} elements beyond atol={tol.atol:g} rtol={tol.rtol:g} "
                      f"(max abs {row['max_abs']:.3g})")
    row["passed"] = not failed
    row["detail"] = "; ".join(failed)
    return row


def _cosine(a: torch.Tensor, b: torch.Tensor) -> float:
    if a.numel() == 0:
        return 1.0
    na, nb = a.norm(), b.norm()
    if na == 0 or nb == 0:
        return 1.0 if na == nb else 0.0
    return float((a @ b) / (na * nb))


def per_token_error(out: torch.Tensor, ref: torch.Tensor) -> torch.Tensor:
    """Each token's (dim 0) max abs error divided by its max |reference|: [T] float64.

    Normalising per token keeps tokens of very different scale comparable; taking statistics of
    this over tokens (not the raw max) keeps the expected growth of a maximum with T out.
    """
    o = out.detach().double().reshape(out.shape[0], -1)
    r = ref.detach().to(o.device, torch.float64).reshape(ref.shape[0], -1)
    finite = torch.isfinite(r) & torch.isfinite(o)
    err = torch.where(finite, (o - r).abs(), torch.zeros((), dtype=o.dtype, device=o.device))
    scale = torch.where(finite, r.abs(), torch.zeros((), dtype=o.dtype, device=o.device))
    scale = scale.amax(dim=1).clamp_min(torch.finfo(torch.float32).tiny)
    return (err.amax(dim=1) / scale).cpu()
