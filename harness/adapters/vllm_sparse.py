"""vLLM's sparse-indexer entries (``vllm.v1.attention.ops.rocm_aiter_mla_sparse``) as implementations.

That module is vLLM's ROCm sparse-MLA path, where the regressions this harness exists for were
found. Its torch fallbacks and Triton kernels need neither ROCm nor vLLM's compiled extension, so
they run wherever vLLM's Python is installed (Triton interpreted on a CPU machine):

=============  =============================  ====================================
implementation op                             vLLM 0.33.0 entry
=============  =============================  ====================================
vllm-torch     fp8_mqa_logits                 ``fp8_mqa_logits_torch``
vllm-torch     fp8_paged_mqa_logits           ``fp8_paged_mqa_logits_torch``
vllm-triton    fp8_paged_mqa_logits           ``rocm_fp8_paged_mqa_logits_triton``
vllm-triton    indexer_k_quant_and_cache      ``indexer_k_quant_and_cache_triton``
=============  =============================  ====================================

Where vLLM's kernels differ from ``../shared/spec/ops.md`` by design, the difference is declared
(``DECLARED``) and judged as declared, never hidden: the Triton K-cache writer lays blocks of more
than one slot out as 16x16 tiles (``kv_layout: shuffle16``, the layout AITER's reader expects), and
the Triton paged-logits kernel writes only the visible window of each row (``outside_window:
unwritten``; vLLM's top-k reads no further). Compiled for an NVIDIA GPU, the logits kernel's dots
run on fp8 tensor cores (``fp8-mma``) and the K-cache writer's fp32 divisions are approximate
(``fp32_division: approximate``, see ``APPROXIMATE_DIVISION`` in the indexer spec); under the
CPU interpreter both are exact, so the fp32 bound holds and the cache must be bit-exact.
"""

from __future__ import annotations

import contextlib
import functools
import importlib

from harness.adapters.signature import bind_by_name
from harness.core.device import triton_compiles_for_nvidia
from harness.core.registry import CostLimit, KnownDeviation, Unsupported

SPARSE_MODULE = "vllm.v1.attention.ops.rocm_aiter_mla_sparse"
SPARSE_ENTRIES = {
    "vllm-torch": {"fp8_mqa_logits": "fp8_mqa_logits_torch",
                   "fp8_paged_mqa_logits": "fp8_paged_mqa_logits_torch"},
    "vllm-triton": {"fp8_paged_mqa_logits": "rocm_fp8_paged_mqa_logits_triton",
                    "indexer_k_quant_and_cache": "indexer_k_quant_and_cache_triton"},
}


DECLARED = {"vllm-torch": {"fp8_paged_mqa_logits": {
    "cuda_graph": "not capturable: it loops over the requests in Python and reads each one's "
                  "length on the host (.item())"}}, "vllm-triton": {
    "fp8_paged_mqa_logits": {"outside_window": "unwritten",
                             **({"accumulation": "fp8-mma"} if triton_compiles_for_nvidia() else {})},
    "indexer_k_quant_and_cache": {"kv_layout": "shuffle16",
                                  **({"fp32_division": "approximate"}
                                     if triton_compiles_for_nvidia() else {})},
}}
ALIASES = {"q_fp8": "q", "kv_cache_fp8": "kv_cache"}
BF16_SCORE_U = 2 ** 16
"""A bf16 score, in the logits bound's units u = 2^-24 of a logit's magnitude: one bf16 ulp of
each head's score (2^-8 relative, 2^16 u). Rounding the finished score alone costs half that,
2^15 u; a CPU's bf16 einsum also rounds partial sums, up to 37,792 u on the smoke and
self-test cases (docs/kernels/sparse_indexer.md), under this bound. fp8 q and k are exact in
bf16, so nothing else may be off."""

DEVIATIONS = {
    "vllm-torch": {
        "fp8_mqa_logits": (KnownDeviation(
            "fp8_mqa_logits_torch computes each head's q.k score in bf16 (an einsum of bf16 "
            "copies of q and k returns bf16), so logits carry bf16 rounding (up to one bf16 ulp, "
            "2^-8, of a score) where the contract asks fp32", outputs=("logits",),
            bounds={"max_err_in_u_bound": BF16_SCORE_U}),),
    },
}
UNSUPPORTED = {
    "vllm-torch": {
        "fp8_paged_mqa_logits": (Unsupported(
            "fp8_paged_mqa_logits_torch with next_n > 1 reads the cache as one row of head_dim "
            "fp8 values + 4 scale bytes per slot, not the block-major layout (all values, then "
            "all scales) that vLLM's own writers and its next_n == 1 path use: wrong keys and "
            "scales, NaN/inf logits (test_vllm_sparse_entries shows it still does)",
            lambda case: case.param("next_n", 1) > 1),),
    },
    "vllm-triton": {
        "fp8_paged_mqa_logits": (Unsupported(
            "vLLM 0.33.0's Triton fp8_paged_mqa_logits takes tl.arange over the heads, which "
            "Triton allows only for a power of two: 3, 5, 6, 12, ... heads fail to compile "
            "(\"arange's range must be a power of 2\"). A contract gap, found by `harness fuzz`: "
            "../shared/spec/ops.md sets no head count, DeepSeek-V3.2 serves 64",
            lambda case: _not_power_of_two(case.param("heads", 64))),
            Unsupported(
                "vLLM 0.33.0's Triton fp8_paged_mqa_logits reads a whole page per 64-key tile and "
                "asserts block_size % 64 == 0; vLLM's dispatcher (rocm_fp8_paged_mqa_logits) "
                "sends other block sizes to its torch fallback, which the vllm-torch entry is",
                lambda case: case.param("block_size", 64) % 64 != 0)),
    },
}


def _not_power_of_two(n) -> bool:
    return n is not None and int(n) > 0 and int(n) & (int(n) - 1) != 0

COST_LIMITS = {"vllm-torch": {"fp8_paged_mqa_logits": CostLimit(
    2 ** 23, "vLLM's fp8_paged_mqa_logits_torch loops in Python over every block of every "
    "request's keys (33 s per call at 256 requests x 4 rows x 65536 keys on an H100); it runs "
    "every case up to 2^23 query rows x context, which covers each next_n, block-table order "
    "and the 65536-key context")}}
"""Its next_n > 1 cases are not judged at any size (UNSUPPORTED), so the larger ones add nothing."""


class Workspace:
    """vLLM's workspace manager as a model runner would have set it up, on ``device``. Buffers
    come NaN-filled (integers: -2), so that what a kernel leaves unwritten shows."""

    def __init__(self, device):
        self.device = device

    def get_simultaneous(self, *shapes_and_dtypes):
        import torch

        return [torch.full(shape, float("nan") if dtype.is_floating_point else -2, dtype=dtype,
                           device=self.device) for shape, dtype in shapes_and_dtypes]


@contextlib.contextmanager
def workspace(module, device):
    """``module.current_workspace_manager`` returning a :class:`Workspace` on ``device``."""
    saved = module.current_workspace_manager
    module.current_workspace_manager = lambda: Workspace(device)
    try:
        yield
    finally:
        module.current_workspace_manager = saved


def discover_sparse():
    """(the module, "") or (None, why it does not import here)."""
    try:
        return importlib.import_module(SPARSE_MODULE), ""
    except Exception as exc:  # ImportError, or a platform probe failing at import
        return None, (f"{SPARSE_MODULE} does not import here ({type(exc).__name__}: "
                      f"{str(exc).splitlines()[0][:160]}); bash scripts/install.sh installs the "
                      "packages it imports")


def _with_workspace(module, fn):
    @functools.wraps(fn)
    def call(q, *args, **kwargs):
        with workspace(module, q.device):
            return fn(q, *args, **kwargs)
    return call


def bind_sparse(module, error: str, blocked: dict[str, str | None]) -> dict[str, dict]:
    """{implementation: {op: contract function, or why not}} for ``SPARSE_ENTRIES``.

    ``blocked``: implementation -> why its backend cannot run here (None when it can)."""
    bound: dict[str, dict] = {}
    for impl, entries in SPARSE_ENTRIES.items():
        ops = bound.setdefault(impl, {})
        for op, name in entries.items():
            fn = getattr(module, name, None) if module is not None else None
            if module is None:
                ops[op] = f"{name}: {error}"
            elif not callable(fn):
                ops[op] = f"{SPARSE_MODULE} has no {name} in this vLLM release"
            elif blocked.get(impl):
                ops[op] = f"{name}: {blocked[impl]}"
            else:
                call = bind_by_name(op, fn, aliases=ALIASES)
                ops[op] = _with_workspace(module, call) if callable(call) else call
    return bound
