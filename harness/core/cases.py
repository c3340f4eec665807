"""Cases: one point of a sweep, and the random generator its inputs are drawn from."""

from __future__ import annotations

import dataclasses
from typing import Any

import torch


@dataclasses.dataclass(frozen=True, init=False)
class Case:
    """One point of a sweep: the op, ``tokens`` (the rows the op processes at once: T for mHC,
    logits rows for top-k, query rows for the indexer; 0 where a spec builds its rows from
    ``batch`` x ``next_n``), ``hidden`` (mHC's H), the seed, the device, and the op family's
    named parameters (each spec declares its own: ``OpSpec.case_params``).

    Everything but the op is keyword-only: ``Case("top_k_per_row_decode", tokens=8,
    top_k=16, context=60, next_n=2)``.
    """
    op: str
    tokens: int
    hidden: int
    seed: int
    device: str
    params: tuple[tuple[str, Any], ...]

    def __init__(self, op: str, *, tokens: int = 0, hidden: int = 0, seed: int = 0,
                 device: str = "cpu", params: tuple[tuple[str, Any], ...] = (), **named: Any):
        for name, value in (("op", op), ("tokens", int(tokens)), ("hidden", int(hidden)),
                            ("seed", int(seed)), ("device", str(device)),
                            ("params", tuple(tuple(p) for p in params) + tuple(named.items()))):
            object.__setattr__(self, name, value)

    @property
    def id(self) -> str:
        extra = "".join(f"-{k}{v}" for k, v in self.params)
        hidden = f"-H{self.hidden}" if self.hidden else ""
        return f"{self.op}-T{self.tokens}{hidden}{extra}-s{self.seed}"

    def param(self, key: str, default: Any = None) -> Any:
        return dict(self.params).get(key, default)

    def with_tokens(self, tokens: int) -> "Case":
        return dataclasses.replace(self, tokens=tokens)


def generator(case: Case, salt: int = 0, device: str = "cpu") -> torch.Generator:
    """A generator seeded from the case (seed, token count) and a per-input ``salt``, so every
    input of every case is reproducible and distinct."""
    g = torch.Generator(device=device)
    g.manual_seed((case.seed * 1_000_003 + salt * 7919 + case.tokens) & 0x7FFF_FFFF_FFFF)
    return g
