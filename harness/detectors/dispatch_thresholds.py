"""Dispatch thresholds: the accuracy check at the token counts on both sides of the places where
kernels switch paths (the profile's ``dispatch_tokens``)."""

from __future__ import annotations

from harness.core.cases import Case
from harness.core.device import triton_interpreted
from harness.core.registry import Implementation
from harness.core.results import Finding
from harness.core.specs import OpSpec
from harness.detectors import probe_cases
from harness.profiles import INTERPRETER_MAX_TOKENS, Profile


def check(spec: OpSpec, impl: Implementation, profile: Profile, base: Case) -> Finding:
    """The accuracy check at the profile's dispatch token counts (Triton kernels under the CPU
    interpreter only up to INTERPRETER_MAX_TOKENS; the message says which counts ran)."""
    tokens = [t for t in profile.dispatch_tokens
              if not (impl.triton and triton_interpreted() and t > INTERPRETER_MAX_TOKENS)]
    return probe_cases.check(spec, impl, base, [(t, ()) for t in tokens], "dispatch_thresholds",
                        f"matches the reference at T={', '.join(map(str, tokens))}",
                        hidden=base.hidden)
