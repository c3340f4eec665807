"""The runtime the shipped kernels need, standing alone: it imports nothing of ``harness``, so a
kernel module reads (and vendors) with this package and the registry's ``register`` only.

- ``device``: GPU or Triton interpreter, multiprocessor count, why Triton cannot run here;
- ``errors``: ``ContractError`` and ``require``, the argument checks' error;
- ``memo``: argument checks memoised per call signature;
- ``deferred``: device-side argument checks read back after the launch, not before;
- ``launch_cache``: a launched kernel's compiled launcher, reused across calls;
- ``triton_utils``: small Triton helpers (launch shapes, bf16/fp8 rounding, dependent launches);
- ``interpreter_speed``: the Triton interpreter's helper calls without re-patching.
"""
