"""SGLang: the DeepSeek-V4 mHC kernels, the DSA top-k fallback and the TileLang paged logits of
the installed release, found by inspection and bound to the contract by name.

=================  =========================  ============================================
implementation     op                         SGLang entry (module ``sglang.`` ...)
=================  =========================  ============================================
sglang-torch       mhc_pre                    ``kernels.ops.layernorm.mhc._mhc_pre_torch``
sglang-torch       mhc_post                   ``kernels.ops.layernorm.mhc._mhc_post_torch``
sglang-torch       mhc_fused_post_pre         the two above, as SGLang runs a layer boundary
sglang-torch       hc_head                    ``srt.models.deepseek_v4.hc_head_torch``
sglang-torch       top_k_per_row_prefill      ``srt.layers.attention.dsa.dsa_topk_backend
                                              ._topk_unfused`` (torch.topk)
sglang-triton      mhc_pre                    ``hc_mix_stats_sinkhorn`` then ``mhc_combine``,
                                              as ``srt/models/deepseek_v4_mhc.py`` composes them
sglang-triton      mhc_post                   ``kernels.ops.layernorm.mhc_post_split_h``
sglang-triton      mhc_fused_post_pre         the two above
sglang-triton      hc_head                    ``kernels.ops.layernorm.mhc_head.fused_hc_head``
sglang-tilelang    mhc_pre/post/fused_post_pre ``kernels.ops.layernorm.mhc.mhc_pre`` ... (TileLang)
sglang-tilelang    fp8_paged_mqa_logits       ``kernels.ops.attention.dsa.tilelang_kernel
                                              .tilelang_fp8_paged_mqa_logits``
=================  =========================  ============================================

Conventions mapped (nothing else): SGLang's mHC entries take ``[T, m, H]``, so other leading
dims are flattened and restored (3-D inputs pass as given); ``post_mix`` comes back ``[T, m]``
from the Triton stats kernel (the contract has ``[T, m, 1]``); the Triton stats kernel takes one
``hc_eps`` (SGLang's config has one) and a post multiplier fixed at 2.0, so a call whose
``hc_pre_eps``/``hc_sinkhorn_eps`` differ or whose ``hc_post_mult_value`` is not 2.0 is refused
with that reason; the top-k fallback takes each row's start and length and returns the indices,
which are written into the contract's buffer. What SGLang has no entry for, or what takes
another contract, is recorded as "not this contract" with the reason; what cannot run on this
machine as "not run here" with the exact missing module or device.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import inspect
import os

from harness.adapters.base import TF32_OPS, Adapter, namespace, not_this_contract
from harness.adapters.signature import bind_by_name
from harness.adapters.token_dims import token_flattened
from harness.core.registry import Unsupported
from kernels.mhc.ops import FUSED_AS_COMPOSITION, MHC_OPS

MODULES = {
    "mhc": "sglang.kernels.ops.layernorm.mhc",
    "mhc_head": "sglang.kernels.ops.layernorm.mhc_head",
    "mhc_post_split_h": "sglang.kernels.ops.layernorm.mhc_post_split_h",
    "model": "sglang.srt.models.deepseek_v4",
    "topk": "sglang.srt.layers.attention.dsa.dsa_topk_backend",
    "dsa_tilelang": "sglang.kernels.ops.attention.dsa.tilelang_kernel",
}
"""The modules the entries live in (by key); each is imported on its own, so one that fails
(TileLang's, without tilelang) leaves the others judged."""

ENTRIES = {
    "sglang-torch": {"mhc_pre": ("mhc", "_mhc_pre_torch"), "mhc_post": ("mhc", "_mhc_post_torch"),
                     "hc_head": ("model", "hc_head_torch"),
                     "top_k_per_row_prefill": ("topk", "_topk_unfused")},
    "sglang-triton": {"mhc_pre": ("mhc", "hc_mix_stats_sinkhorn"),
                      "mhc_post": ("mhc_post_split_h", "mhc_post_split_h"),
                      "hc_head": ("mhc_head", "fused_hc_head")},
    "sglang-tilelang": {"mhc_pre": ("mhc", "mhc_pre"), "mhc_post": ("mhc", "mhc_post"),
                        "mhc_fused_post_pre": ("mhc", "mhc_fused_post_pre"),
                        "fp8_paged_mqa_logits": ("dsa_tilelang", "tilelang_fp8_paged_mqa_logits")},
}
"""Implementation -> op -> (module key, entry name): the entry each op is bound to."""
COMPOSED = {"mhc_fused_post_pre": ("mhc_post", "mhc_pre")}
"""Ops an implementation without its own entry runs as SGLang runs them: its parts in order."""
COMBINE = ("mhc", "mhc_combine")
"""The Triton mhc_pre's second step: ``sum_k pre[k] * residual[k]``."""

OP_ALIASES = {"hc_head": {"x": "hidden_states", "norm_eps": "rms_eps"},
              "mhc_post": {"post": "post_layer_mix", "comb": "comb_res_mix"}}
"""SGLang's parameter names for the contract's, per op (``x`` is hc_head's ``hidden_states``
but mhc_post's ``x``)."""
SGLANG_POST_MULT = 2.0
"""``_hc_mix_reduce_sinkhorn_kernel`` computes ``post = 2.0 * sigmoid(...)``: DeepSeek-V4's
``hc_post_mult_value``, fixed in the kernel."""

NOT_THIS_CONTRACT = {
    "sglang-torch": {
        "top_k_per_row_decode": "SGLang's top-k (_topk_unfused, and sgl_kernel's fast_topk_v2 "
        "behind the same call) takes each row's length, which SGLang's indexer computes from its "
        "own metadata; it has no next_n/seq_lens entry, so the decode contract's causal rule "
        "would be the adapter's code, not SGLang's",
    },
}
SLICE_K = 64
"""``_num_slices_for`` asserts ``K = hc_mult * hidden`` is a multiple of its 64-wide K block."""


def _k_not_sliceable(case) -> bool:
    return (case.param("hc_mult", 4) * case.hidden) % SLICE_K != 0


K_SLICES = Unsupported(not_this_contract(
    f"hc_mix_stats_sinkhorn asserts hc_mult * hidden % {SLICE_K} == 0 (AssertionError from "
    "_num_slices_for): SGLang serves only such hidden sizes (4096, 7168), the contract sets no "
    "bound on H, so H = 200 (the CPU profile) and other H not a multiple of 16 are refused, "
    "never computed wrong"), _k_not_sliceable)

UNSUPPORTED = {"sglang-triton": {"mhc_pre": (K_SLICES,), "mhc_fused_post_pre": (K_SLICES,)},
               "sglang-tilelang": {"fp8_paged_mqa_logits": (Unsupported(
    not_this_contract("tilelang_fp8_paged_mqa_logits asserts one query row per request (q of "
                      "shape [B, 1, H, 128]), a cache block size of 64, head_dim 128 and a "
                      "multiple of 4 heads; SGLang's indexer flattens draft rows into requests "
                      "of their own, with metadata it computes, so next_n > 1 is another "
                      "contract"),
    lambda case: case.param("next_n", 1) != 1 or case.param("block_size", 64) != 64
    or case.param("head_dim", 128) != 128 or (case.param("heads", 64) or 64) % 4 != 0),)}}


CONTIGUOUS_HC_HEAD = {"inputs": "contiguous"}
"""``fused_hc_head`` checks its two tensor inputs and refuses a view by name (``assert
x.is_contiguous(), "x must be contiguous"``, the same for ``hc_fn``; ``mhc_head.py:111``), so
that requirement is declared, for this entry only. ``mhc_post_split_h`` (a bare ``assert
all(t.is_contiguous() ...)``, no message) and ``hc_mix_stats_sinkhorn`` (a bare stride assert)
name no input: their refusals stay failures (docs/vendors.md, Finding 4)."""


def _import(key: str):
    """(module, "") or (None, why it does not import here)."""
    try:
        return importlib.import_module(MODULES[key]), ""
    except Exception as exc:  # ImportError, or a platform probe failing at import time
        return None, (f"{MODULES[key]} does not import here ({type(exc).__name__}: "
                      f"{str(exc).splitlines()[0][:160] if str(exc) else ''})")


@contextlib.contextmanager
def environment_kept():
    """``os.environ`` as it was before: ``import sglang`` points TRITON_CACHE_DIR,
    TORCHINDUCTOR_CACHE_DIR, CUDA_CACHE_PATH and TileLang's cache at its own folder
    (``sglang.srt.environ.redirect_third_party_caches``), which would move the whole run's
    compiled-kernel caches."""
    saved = dict(os.environ)
    try:
        yield
    finally:
        for key in set(os.environ) - set(saved):
            del os.environ[key]
        os.environ.update(saved)


def discover():
    with environment_kept():
        sglang = importlib.import_module("sglang")
        modules, errors = {}, {}
        for key in MODULES:
            modules[key], errors[key] = _import(key)
    return namespace(version=getattr(sglang, "__version__", "?"), modules=modules, errors=errors)


NEEDS_A_SERVER = {"sglang-tilelang": {op: (
    "SGLang's TileLang mHC path reads the running server's published runtime state (its "
    "tensor-parallel group, to place outputs in NCCL symmetric memory, and the 'parallel' "
    "config namespace): outside an SGLang server it raises \"parallel name 'tp_group' has not "
    "been written in this process\" / \"config namespace 'parallel' not published\" "
    "(sglang 0.5.23 on an H200), and faking a server's parallel state is not the adapter's "
    "to do; its Triton mHC path (sglang-triton) is judged")
    for op in ("mhc_pre", "mhc_post", "mhc_fused_post_pre")}}
"""Entries that run only inside a live SGLang server, with the reason (listed under "Not run
here", never judged as failing)."""


def _why_not_here(impl: str, op: str) -> str | None:
    """Why an implementation's entry for ``op`` cannot run on this machine, or None."""
    if impl != "sglang-tilelang":
        return None
    import torch

    if importlib.util.find_spec("tilelang") is None:
        return ("SGLang's TileLang kernels need the tilelang package, which is not installed "
                "(a GPU-host extra)")
    if not torch.cuda.is_available() or torch.version.hip is not None:
        return "SGLang's TileLang kernels compile for a CUDA GPU; this machine has none"
    return NEEDS_A_SERVER.get(impl, {}).get(op)


def _entry(api, key: str, name: str):
    """The entry, or why it is not there."""
    module = api.modules.get(key)
    if module is None:
        return f"{name}: {api.errors.get(key) or MODULES[key] + ' is absent'}"
    fn = getattr(module, name, None)
    return fn if callable(fn) else (f"SGLang {api.version}: {MODULES[key]} has no {name} "
                                    "in this release")


def _parameters(fn) -> tuple[str, ...]:
    return tuple(inspect.signature(fn).parameters)


def _check_parameters(fn, expected: tuple[str, ...]) -> str | None:
    """None when ``fn`` starts with ``expected`` parameters, else why the binding is refused."""
    got = _parameters(fn)
    if got[:len(expected)] != expected:
        return (f"{fn.__module__}.{fn.__qualname__}{inspect.signature(fn)}: the adapter binds "
                f"parameters {expected}; this release renamed or reordered them")
    return None


def _by_name(op: str, fn):
    call = bind_by_name(op, fn, aliases=OP_ALIASES.get(op))
    return token_flattened(op, call) if callable(call) and op in MHC_OPS else call


STATS_PARAMS = ("x_flat", "hc_fn", "hc_scale", "hc_base", "hc_mult", "sinkhorn_iters",
                "rms_eps", "hc_eps")
COMBINE_PARAMS = ("x_flat", "pre", "hc", "out_dtype")


def triton_mhc_pre(stats, combine):
    """SGLang's Triton mhc_pre: the split-K mix GEMM fused with the Sinkhorn
    (``hc_mix_stats_sinkhorn``), then the weighted stream sum (``mhc_combine``), called as
    ``_mix_stats_impl`` and ``_combine`` call them (``srt/models/deepseek_v4_mhc.py``; the
    model's RMSNorm after the combine is not part of the contract)."""
    def mhc_pre(residual, fn, hc_scale, hc_base, rms_eps, hc_pre_eps, hc_sinkhorn_eps,
                hc_post_mult_value, sinkhorn_repeat, n_splits=1):
        if hc_pre_eps != hc_sinkhorn_eps or hc_post_mult_value != SGLANG_POST_MULT:
            raise TypeError(
                f"{stats.__qualname__} takes one hc_eps and a post multiplier fixed at "
                f"{SGLANG_POST_MULT}; this call has hc_pre_eps={hc_pre_eps}, "
                f"hc_sinkhorn_eps={hc_sinkhorn_eps}, hc_post_mult_value={hc_post_mult_value}")
        if n_splits != 1:
            raise TypeError(f"{stats.__qualname__} chooses its own K slices; it takes no n_splits")
        m = residual.shape[-2]
        x_flat = residual.flatten(1)
        pre, post, comb = stats(x_flat=x_flat, hc_fn=fn, hc_scale=hc_scale, hc_base=hc_base,
                                hc_mult=m, sinkhorn_iters=sinkhorn_repeat, rms_eps=rms_eps,
                                hc_eps=hc_pre_eps)
        layer_input = combine(x_flat=x_flat, pre=pre, hc=m, out_dtype=residual.dtype)
        return post.unsqueeze(-1), comb, layer_input

    return mhc_pre


def fused_from_parts(post, pre):
    """mhc_fused_post_pre as SGLang runs a layer boundary without a fused kernel: the post,
    then the next layer's pre on its output."""
    def mhc_fused_post_pre(x, residual, post_layer_mix, comb_res_mix, fn, hc_scale, hc_base,
                           rms_eps, hc_pre_eps, hc_sinkhorn_eps, hc_post_mult_value,
                           sinkhorn_repeat, n_splits=1):
        new_residual = post(x, residual, post_layer_mix, comb_res_mix)
        return (new_residual, *pre(new_residual, fn, hc_scale, hc_base, rms_eps, hc_pre_eps,
                                   hc_sinkhorn_eps, hc_post_mult_value, sinkhorn_repeat,
                                   n_splits))

    return mhc_fused_post_pre


def topk_prefill(topk_unfused):
    """The contract's prefill top-k on SGLang's fallback: each row's start and length (SGLang's
    metadata), the returned ``[rows, top_k]`` indices written into the contract's buffer."""
    def top_k_per_row_prefill(logits, row_starts, row_ends, indices, num_rows, stride0,
                              stride1, top_k):
        rows = int(num_rows)
        score = logits.as_strided((rows, logits.shape[1]), (int(stride0), int(stride1)))
        starts = row_starts[:rows]
        out = topk_unfused(score=score, lengths=row_ends[:rows] - starts, topk=int(top_k),
                           row_starts=starts)
        indices[:rows, :int(top_k)] = out

    return top_k_per_row_prefill


def tilelang_paged_logits(fn):
    """SGLang's TileLang paged logits as its DSA indexer calls it: no DeepGEMM schedule
    metadata, ``clean_logits=False`` (the kernel asserts it)."""
    def fp8_paged_mqa_logits(q, kv_cache, weights, context_lens, block_tables, max_model_len):
        return fn(q, kv_cache, weights, context_lens, block_tables, None, int(max_model_len),
                  clean_logits=False)

    return fp8_paged_mqa_logits


TOPK_PARAMS = ("score", "lengths", "topk", "row_starts")
PAGED_PARAMS = ("q_fp8", "kvcache_fp8", "weight", "seq_lens", "page_table",
                "deep_gemm_metadata", "max_seq_len", "clean_logits")


def _bind_one(impl: str, op: str, fn, api):
    """A contract function for ``fn`` (SGLang's entry of ``op`` in ``impl``), or why not."""
    if impl == "sglang-triton" and op == "mhc_pre":
        combine = _entry(api, *COMBINE)
        if isinstance(combine, str):
            return combine
        return (_check_parameters(fn, STATS_PARAMS) or _check_parameters(combine, COMBINE_PARAMS)
                or token_flattened(op, triton_mhc_pre(fn, combine)))
    if op == "top_k_per_row_prefill":
        return _check_parameters(fn, TOPK_PARAMS) or topk_prefill(fn)
    if op == "fp8_paged_mqa_logits":
        return _check_parameters(fn, PAGED_PARAMS) or tilelang_paged_logits(fn)
    return _by_name(op, fn)


def _bind_impl(impl: str, api) -> dict:
    bound: dict = {}
    for op, (key, name) in ENTRIES[impl].items():
        fn = _entry(api, key, name)
        if isinstance(fn, str):
            bound[op] = fn
        elif blocked := _why_not_here(impl, op):
            bound[op] = f"{name}: {blocked}"
        else:
            bound[op] = _bind_one(impl, op, fn, api)
    for op, parts in COMPOSED.items():
        if op in bound:
            continue
        done = [bound.get(p) for p in parts]
        bound[op] = (fused_from_parts(*done) if all(callable(p) for p in done) else
                     next((f"composed of {p}: {why}" for p, why in zip(parts, done)
                           if isinstance(why, str)), f"{impl} has no {' or '.join(parts)}"))
    for op, reason in NOT_THIS_CONTRACT.get(impl, {}).items():
        bound[op] = not_this_contract(reason)
    return bound


def bind(api) -> dict:
    return {impl: _bind_impl(impl, api) for impl in ENTRIES}


OPS = {impl: tuple(dict.fromkeys((*ENTRIES[impl], *(op for op, parts in COMPOSED.items()
                                                   if set(parts) <= set(ENTRIES[impl])),
                                  *NOT_THIS_CONTRACT.get(impl, ()))))
       for impl in ENTRIES}

ADAPTER = Adapter(
    name="sglang", package="sglang",
    install_hint="bash scripts/install.sh installs SGLang's Python (pip install --no-deps "
                 "sglang, and the few packages its kernel modules import)",
    ops=OPS, discover=discover, bind=bind,
    triton=frozenset({"sglang-triton", "sglang-tilelang"}),
    declared={"sglang-torch": {"mhc_fused_post_pre": FUSED_AS_COMPOSITION},
              "sglang-triton": {"mhc_fused_post_pre": FUSED_AS_COMPOSITION,
                                "hc_head": CONTIGUOUS_HC_HEAD},
              "sglang-tilelang": {**{op: {"accumulation": "tf32"} for op in TF32_OPS},
                                  "fp8_paged_mqa_logits": {"outside_window": "unwritten",
                                                           "accumulation": "fp8-mma"}}},
    unsupported=UNSUPPORTED, quiet_loggers=("sglang",))
