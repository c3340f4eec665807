"""Sweep profiles: which token counts and hidden sizes a run covers.

``smoke`` fits the CPU and the Triton interpreter in CI; ``ci`` is the GPU pre-merge sweep;
``nightly`` reaches production chunked-prefill sizes; ``full`` goes to 131072 tokens.
Odd and non-power-of-two counts are there on purpose: tails of tiles are where slicing bugs live.
"""

from __future__ import annotations

import dataclasses
import os

from harness.device import has_gpu


@dataclasses.dataclass(frozen=True)
class Profile:
    name: str
    tokens: tuple[int, ...]
    hidden: tuple[int, ...]
    seeds: tuple[int, ...]
    baseline_max_tokens: int
    """Token counts up to this form the small-T baseline of the precision-growth detector."""
    batch_invariance_batch: int
    """Size of the 'large batch' the batch-invariance detector embeds its probe tokens in."""


PROFILES = {
    "smoke": Profile("smoke", (1, 2, 7, 33, 64, 257), (64, 200), (0,), 64, 67),
    "ci": Profile("ci", (1, 2, 7, 64, 257, 1024, 4099, 8192), (4096, 7168), (0,), 64, 4099),
    "nightly": Profile("nightly", (1, 2, 7, 64, 257, 1024, 4099, 8192, 32768, 65536),
                       (4096, 7168), (0, 1), 64, 8192),
    "full": Profile("full", (1, 2, 7, 64, 257, 1024, 4099, 8192, 32768, 65536, 131072),
                    (4096, 7168), (0, 1, 2), 64, 32768),
}


def default_profile_name() -> str:
    return os.environ.get("HARNESS_PROFILE") or ("ci" if has_gpu() else "smoke")


def get_profile(name: str | None = None) -> Profile:
    name = name or default_profile_name()
    if name not in PROFILES:
        raise KeyError(f"unknown profile {name!r}; choose one of {', '.join(PROFILES)}")
    return PROFILES[name]
