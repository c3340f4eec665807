"""vLLM's own sparse-indexer step (``rocm_aiter_sparse_attn_indexer``), run on any machine.

The function is the orchestration where the out-of-bounds class of regression lived (vLLM PR
42810: the decode path sliced ``topk_indices_buffer`` with the real instead of the padded token
count; the AITER prefill top-k returned global column numbers). It runs here as vLLM ships it,
with its own K-cache writer, gather, pack/unpack (vLLM's Triton kernels, interpreted on CPU) and
its torch logits; the harness stands in only where vLLM calls out of its Python:

- ``torch.ops._C.top_k_per_row_prefill`` / ``_decode``: the harness's reference top-k, defined
  in the ``_C`` namespace when vLLM's compiled extension is not loaded;
- ``rocm_aiter_ops``: AITER off (so logits take vLLM's torch paths), except, with
  ``aiter_prefill_topk=True``, its prefill top-k, which returns global column numbers as AITER
  does, so that vLLM's own localisation (``_localize_aiter_prefill_topk``) is exercised;
- the forward context and workspace manager a model runner would have set up.

The K cache uses block size 1 by default: vLLM's writer packs blocks of more than one slot as
SHUFFLE tiles that its torch paged-logits fallback does not read (only AITER's preshuffled
reader does), so block size 1 is the layout that vLLM's CPU path is consistent on (see the
closing note of issue 13). The other block sizes vLLM's ROCm indexer backend accepts (multiples
of 16) run too: its prefill (writer and gather both SHUFFLE) is consistent there, its decode on
this path is not (``suites/test_vllm_indexer_step.py`` shows it).
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import pathlib
import sys
import types

import torch

from harness.adapters.vllm_sparse import workspace
from harness.core.registry import REFERENCE, get
from kernels.sparse_indexer.step import StepBatch
from kernels.sparse_indexer import torch as ref
from kernels.topk.compare import SENTINEL, guarded_buffer

MODULE = "vllm.v1.attention.ops.rocm_aiter_mla_sparse"
LAYER = "harness.indexer"
_TOPK_SCHEMAS = {
    "top_k_per_row_prefill": "(Tensor logits, Tensor row_starts, Tensor row_ends, Tensor(a!) "
                             "indices, int num_rows, int stride0, int stride1, int top_k) -> ()",
    "top_k_per_row_decode": "(Tensor logits, int next_n, Tensor seq_lens, Tensor(a!) indices, "
                            "int num_rows, int stride0, int stride1, int top_k) -> ()",
}
_LIBRARY: list = []


class VllmIndexerUnavailable(RuntimeError):
    """vLLM's indexer module cannot be imported here; the message says what is missing."""


def load(path: str | pathlib.Path | None = None) -> types.ModuleType:
    """The installed module, or a copy of it at ``path`` (a scratch replay of an older version)."""
    from harness.adapters.vllm import import_vllm

    try:
        import_vllm()
        if path is None:
            return importlib.import_module(MODULE)
        name = f"{MODULE}_replay_{abs(hash(str(path)))}"
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        torch_utils = importlib.import_module("vllm.utils.torch_utils")
        register = torch_utils.direct_register_custom_op
        # The installed module already registered its torch custom ops; the copy's functions
        # are called directly, so it registers none (a second registration is an error).
        torch_utils.direct_register_custom_op = lambda *args, **kwargs: None
        try:
            spec.loader.exec_module(module)
        finally:
            torch_utils.direct_register_custom_op = register
        return module
    except ImportError as exc:
        raise VllmIndexerUnavailable(
            f"{MODULE} does not import here ({type(exc).__name__}: {exc}); bash scripts/install.sh "
            "installs vLLM and the packages that module imports") from exc


def _ensure_c_topk() -> None:
    """The harness's reference top-k as ``torch.ops._C.*`` where vLLM's compiled ops are absent."""
    for op, schema in _TOPK_SCHEMAS.items():
        if _has_c_op(op):
            continue
        if not _LIBRARY:
            _LIBRARY.append(torch.library.Library("_C", "FRAGMENT"))
        lib = _LIBRARY[0]
        lib.define(op + schema)
        fn = get(op, REFERENCE).fn

        def impl(*args, _fn=fn):
            _fn(*args)

        lib.impl(op, impl, "CompositeExplicitAutograd")


def _has_c_op(op: str) -> bool:
    try:
        return getattr(torch.ops._C, op, None) is not None
    except (AttributeError, RuntimeError):
        return False


class _Aiter:
    """``rocm_aiter_ops`` as vLLM sees it on a machine without AITER, optionally with AITER's
    prefill top-k (global column numbers, as AITER's kernel returns them)."""

    def __init__(self, prefill_topk: bool):
        self.prefill_topk = prefill_topk

    def is_enabled(self) -> bool:
        return False

    def is_rdna_aiter_enabled(self) -> bool:
        return False

    def is_indexer_top_k_supported(self, *, is_prefill: bool, **_) -> bool:
        return self.prefill_topk and is_prefill

    def indexer_top_k_prefill(self, logits, row_starts, row_ends, indices, topk_tokens):
        rows = logits.shape[0]
        get("top_k_per_row_prefill", REFERENCE).fn(logits, row_starts, row_ends, indices, rows,
                                                    logits.stride(0), logits.stride(1),
                                                    topk_tokens)
        chosen = indices[:rows, :topk_tokens]
        chosen.copy_(torch.where(chosen >= 0, chosen + row_starts[:rows, None], chosen))


def _metadata(b: StepBatch):
    from vllm.v1.attention.backends.mla.indexer import (DeepseekV32IndexerMetadata,
                                                        DeepseekV32IndexerPrefillChunkMetadata,
                                                        DeepseekV32IndexerPrefillMetadata,
                                                        DeepSeekV32IndexerDecodeMetadata)

    dev = b.slot_mapping.device
    requests = b.decode_lens.shape[0]
    real = requests - (b.num_padded_decode - b.num_decode) // max(b.next_n, 1)
    decode = prefill = None
    if requests:
        lens = torch.tensor([b.next_n] * real + [0] * (requests - real), dtype=torch.int32,
                            device=dev)
        decode = DeepSeekV32IndexerDecodeMetadata(
            block_table=b.decode_tables, seq_lens=b.decode_lens, decode_lens=lens,
            requires_padding=real != requests, schedule_metadata=torch.empty(0, device=dev))
    if b.num_prefill:
        totals = [c + n for c, n in zip(b.prefill_contexts, b.prefill_lens)]
        cu = torch.tensor([0] + totals, dtype=torch.int32, device=dev).cumsum(0).int()
        to_seq = torch.repeat_interleave(torch.arange(len(totals), dtype=torch.int32, device=dev),
                                         torch.tensor(totals, device=dev))
        chunk = DeepseekV32IndexerPrefillChunkMetadata(
            block_table=torch.stack(b.prefill_tables), cu_seqlen_ks=b.prefill_starts,
            cu_seqlen_ke=b.prefill_ends, cu_seq_lens=cu, token_to_seq=to_seq,
            total_seq_lens=int(sum(totals)), max_seqlen_k=max(totals),
            token_start=b.num_decode, token_end=b.num_decode + b.num_prefill,
            num_reqs=len(totals))
        prefill = DeepseekV32IndexerPrefillMetadata(chunks=[chunk])
    seq_lens = torch.cat([b.decode_lens, torch.tensor(
        [c + n for c, n in zip(b.prefill_contexts, b.prefill_lens)], dtype=torch.int32,
        device=dev)])
    return DeepseekV32IndexerMetadata(
        seq_lens=seq_lens, max_seq_len=int(seq_lens.max()) if seq_lens.numel() else 0,
        slot_mapping=_real_slots(b), num_decodes=real, num_decode_tokens=b.num_decode,
        num_prefills=len(b.prefill_lens), num_prefill_tokens=b.num_prefill,
        decode=decode, prefill=prefill)


def _real_slots(b: StepBatch) -> torch.Tensor:
    """vLLM's slot mapping covers the real tokens only (graph padding has none)."""
    return b.slot_mapping[_real_slots_mask(b)]


@contextlib.contextmanager
def _patched(module, b: StepBatch, aiter_prefill_topk: bool):
    from vllm.config import CUDAGraphMode

    aiter_ops = importlib.import_module("vllm._aiter_ops")
    context = types.SimpleNamespace(attn_metadata={LAYER: _metadata(b)},
                                    cudagraph_runtime_mode=CUDAGraphMode.NONE)
    saved = (module.get_forward_context, aiter_ops.rocm_aiter_ops)
    module.get_forward_context = lambda: context
    aiter_ops.rocm_aiter_ops = _Aiter(aiter_prefill_topk)
    try:
        with workspace(module, b.slot_mapping.device):
            yield
    finally:
        module.get_forward_context, aiter_ops.rocm_aiter_ops = saved


def run_step(module, b: StepBatch, *, aiter_prefill_topk: bool = False,
             buffer_as_allocated: bool = True) -> dict:
    """vLLM's indexer on step ``b``; returns {buffer (guarded), kv_cache} like the harness's.

    ``buffer_as_allocated``: ``topk_indices_buffer`` exactly ``top_k`` wide, as vLLM allocates
    it, with guard rows around it; False adds guard columns, so its rows are strided."""
    if b.block_size != 1 and b.block_size % 16:
        raise ValueError(f"vLLM's ROCm indexer backend takes block_size 1 or a multiple of 16, "
                         f"not {b.block_size} (DeepseekV32IndexerBackend."
                         "get_supported_kernel_block_sizes)")
    if b.num_padded_decode != b.num_decode and b.num_prefill:
        raise ValueError("vLLM pads decode-only batches for CUDA graphs: a step with graph "
                         "padding must have no prefill tokens")
    _ensure_c_topk()
    kv_cache = b.cache_written_by(lambda k, cache, slots, d, fmt: (
        module.indexer_k_quant_and_cache_triton(k, cache.squeeze(2), slots, d, fmt or "fp32")))
    buffer = guarded_buffer(b.num_tokens, b.top_k, 0, kv_cache.device,
                            side_cols=not buffer_as_allocated)
    buffer.fill_(SENTINEL)
    scale_fmt = "ue8m0" if b.softmax_scale == 2.0 ** -4 else None
    q_fp8, weights = ref.fp8_quantize_q(b.q, b.weights, b.softmax_scale)
    keys = b.k_new[_real_slots_mask(b)]
    with _patched(module, b, aiter_prefill_topk):
        module.rocm_aiter_sparse_attn_indexer(
            torch.empty(b.num_tokens, 1, device=kv_cache.device), LAYER, kv_cache.squeeze(2), q_fp8, keys, weights,
            b.head_dim, scale_fmt or "fp32", b.top_k, b.head_dim, b.max_model_len,
            sum(c + n for c, n in zip(b.prefill_contexts, b.prefill_lens)) or 1,
            buffer[:b.num_tokens])
    return {"buffer": buffer, "kv_cache": kv_cache}


def _real_slots_mask(b: StepBatch) -> torch.Tensor:
    """Rows of this step's keys and slots that are real tokens, not graph padding."""
    keep = torch.ones(b.k_new.shape[0], dtype=torch.bool, device=b.k_new.device)
    keep[b.num_decode:b.num_padded_decode] = False
    return keep
