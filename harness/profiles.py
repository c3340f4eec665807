"""Sweep profiles: which token counts and hidden sizes a run covers.

``smoke`` fits the CPU and the Triton interpreter in CI; ``ci`` is the GPU pre-merge sweep;
``nightly`` reaches production chunked-prefill sizes; ``full`` goes to 131072 tokens.
Odd and non-power-of-two counts are there on purpose: tails of tiles are where slicing bugs live.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os

from harness.core.input_space import PROFILES as PROFILE_NAMES


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
    dispatch_tokens: tuple[int, ...]
    """Token counts on both sides of the places where kernels switch paths: the shipped kernels'
    128-token tile, vLLM's 1024-token switch to TileLang's block-M prenorm GEMM (the carry-over
    bug of vLLM PR 49429), 4096 and 8192. Run at the profile's smallest hidden size."""
    runs: int
    """How many times the accuracy suite runs an implementation on the same inputs; runs after
    the first must be bitwise equal to it (an intermittent race loses on some runs only)."""
    repeat_one_case_in: int
    """Which cases get the extra runs: every case (1), or one in N, picked by a stable hash of
    the case id (the CPU profile, where the Triton interpreter makes each run cost seconds)."""
    case_time_limit_s: float = 600.0
    """How long one test may run before it fails as hung (pytest-timeout; end-to-end tests get
    ``harness.pytest_plugin.time_limit.E2E_TIME_LIMIT_S``). Far above what any test takes: the
    slowest non-E2E test of the smoke profile takes under a minute on a 2-core CPU."""
    max_declared_skip_share: float = 0.25
    """The largest share of a judged implementation's sweep cases of one op that its own
    declarations (``Unsupported`` inputs, a ``CostLimit``) may skip in a run called good: past
    it, or when an op of it is judged on no case at all, the verdict is "could not test" (125)
    with the counts, unless the run is given ``--accept-partial-coverage``. Skips that are the
    machine's (no GPU, the CPU's Triton interpreter limits) are counted and shown, not held
    against the implementation. A quarter in every profile: the shipped kernels declare nothing,
    and a declaration that skips more leaves most of an op unjudged (docs/usage.md, "What decides the
    exit code")."""
    judged_by_default: tuple[str, ...] = ("shipped", "module")
    """Whose failures decide the exit code when neither ``--impl`` nor ``--require`` names an
    implementation (``Implementation.origin``): the harness's own kernels (``shipped``) and
    those ``--impl-module`` loads (``module``); vendor adapters (``vendor``) are run and shown
    in the matrix, and judged when named. See docs/usage.md, "What decides the exit code"."""


DISPATCH_TOKENS = (127, 129, 1023, 1025, 4095, 4097)
BASELINE_MAX_TOKENS = 64
"""The precision-growth baseline is T <= 64 in every profile: a baseline that pooled every T up
to 8192 (nightly) or 32768 (full) could not see an onset inside that range."""

PROFILES = {
    "smoke": Profile("smoke", (1, 2, 7, 33, 64, 257), (64, 200), (0,), BASELINE_MAX_TOKENS, 67,
                     DISPATCH_TOKENS, runs=2, repeat_one_case_in=4, case_time_limit_s=600.0,
                     max_declared_skip_share=0.25),
    "ci": Profile("ci", (1, 2, 7, 64, 257, 1024, 4099, 8192), (4096, 7168), (0,),
                  BASELINE_MAX_TOKENS, 4099,
                  DISPATCH_TOKENS + (8191, 8193), runs=2, repeat_one_case_in=1,
                  case_time_limit_s=600.0, max_declared_skip_share=0.25),
    "nightly": Profile("nightly", (1, 2, 7, 64, 257, 1024, 4099, 8192, 32768, 65536),
                       (4096, 7168), (0, 1), BASELINE_MAX_TOKENS, 8192,
                       DISPATCH_TOKENS + (8191, 8193),
                       runs=3, repeat_one_case_in=1, case_time_limit_s=1200.0,
                       max_declared_skip_share=0.25),
    "full": Profile("full", (1, 2, 7, 64, 257, 1024, 4099, 8192, 32768, 65536, 131072),
                    (4096, 7168), (0, 1, 2), BASELINE_MAX_TOKENS, 32768,
                    DISPATCH_TOKENS + (8191, 8193),
                    runs=3, repeat_one_case_in=1, case_time_limit_s=1800.0,
                    max_declared_skip_share=0.25),
}

if tuple(PROFILES) != PROFILE_NAMES:  # the one list the CLI and input spaces name them by
    raise RuntimeError(f"profiles {tuple(PROFILES)} differ from harness.core.input_space."
                       f"PROFILES {PROFILE_NAMES}: keep the two in step")

INTERPRETER_MAX_TOKENS = 257
"""Largest token count a Triton kernel is run at under the CPU interpreter. The mHC kernels run
one program per token there: mhc_pre at T=4097, H=64 takes 114 s (T=1025: 28 s) on a CI core,
so the interpreter stops at the smoke profile's largest count; GPU profiles cross every
dispatch threshold with every implementation."""


COMPOSED_INTERPRETER_MAX_TOKENS = 7
"""Largest token count an implementation declared a composition of other ops (``declared
composition``: the fused mHC op as mhc_post then mhc_pre) is run at under the CPU interpreter: its
parts are judged at every token count of the profile there, so above this size it would run the
same kernels again; what only the composition can get wrong (which output feeds which input)
shows at any size, and GPU profiles judge it at every size."""


INTERPRETER_MAX_ELEMENTS = 2 ** 18
"""Largest case (rows x width, ``OpSpec.case_elements``) a Triton kernel is run at under the CPU
interpreter: top-k rows of 16385+ columns take minutes there, while the torch paths and user
modules judge them in a second, so the CPU profile keeps those sizes for them."""


def runs_for(profile: Profile, case_id: str) -> int:
    """How many runs the accuracy suite gives this case (see ``Profile.runs``)."""
    if profile.repeat_one_case_in <= 1:
        return profile.runs
    digest = int(hashlib.sha256(case_id.encode()).hexdigest()[:8], 16)
    return profile.runs if digest % profile.repeat_one_case_in == 0 else 1


def default_profile_name() -> str:
    if os.environ.get("HARNESS_PROFILE"):
        return os.environ["HARNESS_PROFILE"]
    from harness.core.device import has_gpu

    return "ci" if has_gpu() else "smoke"


def get_profile(name: str | None = None) -> Profile:
    name = name or default_profile_name()
    if name not in PROFILES:
        raise KeyError(f"unknown profile {name!r}; choose one of {', '.join(PROFILES)}")
    return PROFILES[name]
