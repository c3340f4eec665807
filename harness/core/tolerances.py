"""Tolerances: the type, and the defaults for outputs whose spec sets none.

An output passes where ``|out - ref| <= atol + rtol * |ref|`` elementwise, against a float64
reference. Each spec keeps its own table (``OpSpec.tolerances``, e.g. ``kernels/mhc/tolerances.py``),
each number with the reason it is what it is, and may tighten it per declared accumulation class
(``ToleranceTable.by_accumulation``). Tolerances are never widened to make a kernel pass: a
kernel outside them is reported. Growth of error with token count is judged separately by the
large-token precision detector, against the noise floors here or the spec's own.
"""

from __future__ import annotations

import dataclasses
from typing import Mapping

import torch

BF16_ULP_REL = 2.0 ** -7


@dataclasses.dataclass(frozen=True)
class Tolerance:
    atol: float
    rtol: float
    reason: str


DEFAULT_BY_DTYPE: dict[torch.dtype, Tolerance] = {
    torch.float32: Tolerance(1e-5, 1.3e-6, "torch.testing's float32 default"),
    torch.bfloat16: Tolerance(1e-5, BF16_ULP_REL, "1 bf16 ulp"),
    torch.float16: Tolerance(1e-5, 2.0 ** -10, "1 fp16 ulp"),
}


NOISE_FLOOR_BY_DTYPE: dict[torch.dtype, float] = {
    torch.float32: 2.0 ** -21,
    torch.bfloat16: 2.0 ** -8,
    torch.float16: 2.0 ** -11,
}
"""Per-token relative error that counts as rounding noise for the precision-growth detector: a
few fp32 ulps for fp32 outputs, one rounding (2**-8 relative) for bf16."""


@dataclasses.dataclass(frozen=True)
class ToleranceTable:
    """One op's tolerances: per output, tighter ones per (output, declared accumulation class),
    and the per-token noise floors of the precision-growth detector. Outputs it does not name
    get the dtype's default."""
    by_output: Mapping[str, Tolerance] = dataclasses.field(default_factory=dict)
    by_accumulation: Mapping[tuple[str, str], Tolerance] = dataclasses.field(default_factory=dict)
    noise_floors: Mapping[str, float] = dataclasses.field(default_factory=dict)

    def tolerance(self, op: str, output: str, dtype: torch.dtype,
                  accumulation: str | None = None) -> Tolerance:
        """The output's bound; with ``accumulation``, the bound of that declared class where the
        table has one (else the op's, which admits every declared class)."""
        if accumulation and (output, accumulation) in self.by_accumulation:
            return self.by_accumulation[(output, accumulation)]
        if output in self.by_output:
            return self.by_output[output]
        if dtype in DEFAULT_BY_DTYPE:
            return DEFAULT_BY_DTYPE[dtype]
        raise KeyError(f"no tolerance for {op}.{output} ({dtype}); add one to the spec's "
                       "tolerance table (kernels/<family>/tolerances.py) with the reason for its value")

    def noise_floor(self, output: str, dtype: torch.dtype) -> float:
        return self.noise_floors.get(output, NOISE_FLOOR_BY_DTYPE.get(dtype, 0.0))
