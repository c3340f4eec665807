"""The indexer step, composed from registered ops, and its float64 reference.

One step of a mixed batch, laid out like vLLM's (decode tokens first):

- rows ``[0, num_decode)``: real decode tokens, ``next_n`` per request;
- rows ``[num_decode, num_padded_decode)``: graph padding (padded requests with ``seq_len 0``,
  slot ``-1``): their top-k rows must stay -1;
- rows ``[num_padded_decode, num_tokens)``: prefill tokens of ``seqs`` sequences, each with
  cached context from earlier steps.

``run_step`` quantises and caches this step's K (``indexer_k_quant_and_cache``), quantises Q
(``fp8_quantize_q``), scores prefill rows against their sequences' keys read back from the cache
(``fp8_mqa_logits``) and decode rows through the block tables (``fp8_paged_mqa_logits``), and
selects top-k into one ``topk_indices_buffer`` pre-filled with -1 (``top_k_per_row_prefill`` /
``_decode``). Every piece is looked up by implementation name, so any of them can be swapped.
"""

from __future__ import annotations

import dataclasses
from typing import Callable

import torch

from kernels.topk.batches import decode_seq_lens, ragged_prefill
from harness.core.cases import Case, generator
from kernels.topk.compare import SENTINEL, compare_topk, guard_violations, guarded_buffer
from kernels.sparse_indexer import torch as ref
from kernels.sparse_indexer.compare import U32, cache_row
from kernels.sparse_indexer.inputs import BLOCK_SIZE, HEAD_DIM, _activations
from kernels.sparse_indexer.spec import _f64_logits
from kernels.topk.torch import select_into

STEP_OPS = ("indexer_k_quant_and_cache", "fp8_quantize_q", "fp8_mqa_logits",
            "fp8_paged_mqa_logits", "top_k_per_row_prefill", "top_k_per_row_decode")


@dataclasses.dataclass
class StepBatch:
    k_new: torch.Tensor
    q: torch.Tensor
    weights: torch.Tensor
    softmax_scale: float
    kv_cache: torch.Tensor
    slot_mapping: torch.Tensor
    num_decode: int
    num_padded_decode: int
    next_n: int
    decode_lens: torch.Tensor
    decode_tables: torch.Tensor
    prefill_tables: list[torch.Tensor]
    prefill_contexts: list[int]
    prefill_lens: list[int]
    prefill_starts: torch.Tensor
    prefill_ends: torch.Tensor
    max_model_len: int
    top_k: int
    block_size: int = BLOCK_SIZE
    garbage_cache: torch.Tensor | None = None
    """The cache before any key was written (garbage bytes)."""
    history_k: torch.Tensor | None = None
    history_slots: torch.Tensor | None = None
    """The keys of earlier steps and their slots: ``kv_cache`` is ``garbage_cache`` with them
    written by the reference writer; ``cache_written_by`` writes them with another."""

    @property
    def head_dim(self) -> int:
        return self.k_new.shape[1]

    @property
    def num_prefill(self) -> int:
        return int(sum(self.prefill_lens))

    @property
    def num_tokens(self) -> int:
        return self.num_padded_decode + self.num_prefill

    def fresh_cache(self) -> torch.Tensor:
        return self.kv_cache.clone()

    @property
    def scale_fmt(self):
        return "ue8m0" if self.softmax_scale == 2.0 ** -4 else None

    def cache_written_by(self, writer) -> torch.Tensor:
        """The cache of earlier steps as ``writer`` (an ``indexer_k_quant_and_cache``) writes
        it: a reader is judged on what its own writer produces, in whatever layout."""
        cache = self.garbage_cache.clone()
        if self.history_k.shape[0]:
            writer(self.history_k, cache, self.history_slots, self.head_dim, self.scale_fmt)
        return cache

    def reference_cache(self, layout: str) -> torch.Tensor:
        """The cache after this step, every key written by the reference in ``layout``."""
        cache = self.garbage_cache.clone()
        for k, slots in ((self.history_k, self.history_slots), (self.k_new, self.slot_mapping)):
            ref.write_cache(k, cache, slots, self.scale_fmt, layout)
        return cache


STEP_PARAMS = {"batch": 4, "next_n": 1, "pad": 0, "seqs": 1, "prefill": 0, "context": 1024,
               "heads": 64, "top_k": 64, "data": "random", "block_size": BLOCK_SIZE,
               "head_dim": HEAD_DIM}
"""A step case's parameters and defaults: ``batch`` decode requests, ``next_n``, ``pad`` padded
requests, ``seqs`` prefill sequences sharing ``prefill`` tokens, ``context`` max context,
``heads``, ``top_k``, ``data`` (``random``, or ``exact``: small integers and power-of-two
scales, so every logit is exact in fp32 and the step must match the reference's selection up
to ties), ``block_size`` of the paged K cache, ``head_dim``."""


def make_step(case: Case) -> StepBatch:
    """The indexer step of ``case`` (parameters: STEP_PARAMS)."""
    unknown = [name for name, _ in case.params if name not in STEP_PARAMS]
    if unknown:
        raise ValueError(f"{case.id}: a step case takes no parameter {', '.join(unknown)}; it "
                         f"takes {', '.join(STEP_PARAMS)}")

    def param(name):
        return case.param(name, STEP_PARAMS[name])

    dev, g = case.device, generator(case, 21)
    batch, next_n, pad = param("batch"), param("next_n"), param("pad")
    heads, n, exact = param("heads"), param("context"), param("data") == "exact"
    d = param("head_dim")
    lens = decode_seq_lens(batch, next_n, n, g) if batch else torch.zeros(0, dtype=torch.int32)
    pre = ragged_prefill(param("prefill"), param("seqs"), n, g)
    pre_lens = pre.seq_lens if param("prefill") else []
    totals = [int(x) for x in lens] + [c + n_new for c, n_new in zip(pre.contexts, pre_lens)]
    bs = param("block_size")
    need = [(t + bs - 1) // bs for t in totals]
    num_blocks = sum(need) + 3
    order = torch.randperm(num_blocks, generator=g)
    max_blocks = max([(n + bs - 1) // bs] + need)
    tables, used = [], 0
    for nb in need:
        row = torch.randint(0, num_blocks, (max_blocks,), generator=g, dtype=torch.int32)
        row[:nb] = order[used:used + nb].int()
        tables.append(row)
        used += nb
    kv_cache = torch.randint(0, 256, (num_blocks, bs, 1, d + 4), generator=g,
                             dtype=torch.uint8).to(dev)
    garbage = kv_cache.clone()
    old_k, old_slots = [], []

    def keys(salt, count):
        if exact:
            return torch.randint(-4, 5, (count, d), generator=generator(case, salt)
                                 ).to(dev, torch.bfloat16).index_fill_(1, torch.tensor([0], device=dev), 4)
        return _activations(case, salt, count, d)

    def slots(req, positions):
        return tables[req].to(dev).long()[positions // bs] * bs + positions % bs

    scale_fmt = "ue8m0" if exact else None
    new_k, new_slots = [], []
    for req, total in enumerate(totals):
        fresh = next_n if req < batch else pre_lens[req - batch]
        history = total - fresh
        pos = torch.arange(total, device=dev)
        all_keys = keys(200 + req, total)
        if history:
            ref.indexer_k_quant_and_cache(all_keys[:history], kv_cache, slots(req, pos[:history]),
                                          d, scale_fmt)
            old_k.append(all_keys[:history])
            old_slots.append(slots(req, pos[:history]))
        new_k.append(all_keys[history:])
        new_slots.append(slots(req, pos[history:]))
        if req == batch - 1 and pad:
            new_k.append(torch.zeros(pad * next_n, d, dtype=torch.bfloat16, device=dev))
            new_slots.append(torch.full((pad * next_n,), -1, dtype=torch.long, device=dev))
    num_decode = batch * next_n
    num_tokens = num_decode + pad * next_n + sum(pre_lens)
    if exact:
        q = torch.randint(-8, 9, (num_tokens, heads, d), generator=generator(case, 22))
        q[..., 0] = 8
        q = q.to(dev, torch.bfloat16)
        w = torch.randint(-3, 4, (num_tokens, heads), generator=generator(case, 23)).float().to(dev)
    else:
        q = _activations(case, 22, num_tokens, heads, d)
        w = torch.randn(num_tokens, heads, generator=generator(case, 23, dev), device=dev)
    dec_tables = torch.stack(tables[:batch] + [torch.randint(0, num_blocks, (max_blocks,),
                                                             generator=g, dtype=torch.int32)
                                               for _ in range(pad)]) if batch + pad else \
        torch.zeros(0, max_blocks, dtype=torch.int32)
    return StepBatch(
        k_new=torch.cat(new_k) if new_k else torch.zeros(0, d, dtype=torch.bfloat16, device=dev),
        q=q, weights=w, softmax_scale=2.0 ** -4 if exact else d ** -0.5, kv_cache=kv_cache,
        slot_mapping=torch.cat(new_slots) if new_slots else torch.zeros(0, dtype=torch.long, device=dev),
        num_decode=num_decode, num_padded_decode=num_decode + pad * next_n, next_n=next_n,
        decode_lens=torch.cat([lens, torch.zeros(pad, dtype=torch.int32)]).to(dev),
        decode_tables=dec_tables.to(dev), prefill_tables=[t.to(dev) for t in tables[batch:]],
        prefill_contexts=list(pre.contexts[:len(pre_lens)]), prefill_lens=list(pre_lens),
        prefill_starts=pre.starts.to(dev), prefill_ends=pre.ends.to(dev),
        max_model_len=max_blocks * bs, top_k=param("top_k"), block_size=bs,
        garbage_cache=garbage,
        history_k=torch.cat(old_k) if old_k else torch.zeros(0, d, dtype=torch.bfloat16, device=dev),
        history_slots=torch.cat(old_slots) if old_slots else torch.zeros(0, dtype=torch.long,
                                                                         device=dev))


def gather_prefill_keys(b: StepBatch, kv_cache: torch.Tensor):
    """(k_fp8, k_scale) of every prefill sequence's keys (context + this step's), seq-major."""
    parts = [ref.gather_paged_keys(kv_cache, t[None], 0, c + n, b.head_dim, b.block_size)
             for t, c, n in zip(b.prefill_tables, b.prefill_contexts, b.prefill_lens)]
    if not parts:
        return (torch.zeros(0, b.head_dim, device=kv_cache.device).to(ref.FP8),
                torch.zeros(0, device=kv_cache.device))
    return torch.cat([p[0] for p in parts]), torch.cat([p[1] for p in parts])


def decode_rows(buffer: torch.Tensor, b: StepBatch) -> tuple[torch.Tensor, int]:
    """The decode part of the buffer and its row count: the padded size, consistently."""
    return buffer[:b.num_padded_decode], b.num_padded_decode


def run_step(b: StepBatch, impls: dict[str, Callable], *,
             decode_view: Callable = decode_rows) -> dict:
    """Run one step, the cache of earlier steps written by the step's own K-cache writer;
    returns {buffer (the guarded topk_indices_buffer view), kv_cache}."""
    kv_cache = b.cache_written_by(impls["indexer_k_quant_and_cache"])
    buffer = guarded_buffer(b.num_tokens, b.top_k, 0, kv_cache.device)
    buffer.fill_(SENTINEL)
    buffer[:b.num_tokens] = -1
    impls["indexer_k_quant_and_cache"](b.k_new, kv_cache, b.slot_mapping, b.head_dim,
                                       "ue8m0" if b.softmax_scale == 2.0 ** -4 else None)
    q_fp8, w = impls["fp8_quantize_q"](b.q, b.weights, b.softmax_scale)
    if b.num_prefill:
        rows = slice(b.num_padded_decode, b.num_tokens)
        logits = impls["fp8_mqa_logits"](q_fp8[rows], gather_prefill_keys(b, kv_cache), w[rows],
                                         b.prefill_starts, b.prefill_ends)
        impls["top_k_per_row_prefill"](logits, b.prefill_starts, b.prefill_ends, buffer[rows],
                                       b.num_prefill, logits.stride(0), logits.stride(1), b.top_k)
    if b.num_padded_decode:
        heads = b.q.shape[1]
        q_dec = q_fp8[:b.num_padded_decode].view(-1, b.next_n, heads, b.head_dim)
        logits = impls["fp8_paged_mqa_logits"](q_dec, kv_cache, w[:b.num_padded_decode],
                                               b.decode_lens, b.decode_tables, b.max_model_len)
        view, rows = decode_view(buffer, b)
        impls["top_k_per_row_decode"](logits, b.next_n, b.decode_lens, view, rows,
                                      logits.stride(0), logits.stride(1), b.top_k)
        requests = b.decode_lens.shape[0]
        if view.shape[0] != requests * b.next_n:
            raise RuntimeError(f"decode rows view has {view.shape[0]} rows, but the padded batch "
                               f"reshapes to [{requests}, {b.next_n}, top_k]: size the decode part "
                               "of topk_indices_buffer by num_padded_tokens")
    return {"buffer": buffer, "kv_cache": kv_cache}


def reference_step(b: StepBatch) -> dict:
    """float64 logits and the selection on them, from the reference quantisation."""
    kv_cache = b.fresh_cache()
    ref.indexer_k_quant_and_cache(b.k_new, kv_cache, b.slot_mapping, b.head_dim,
                                  "ue8m0" if b.softmax_scale == 2.0 ** -4 else None)
    q_fp8, w = ref.fp8_quantize_q(b.q, b.weights, b.softmax_scale)
    dev = kv_cache.device
    width = max(b.max_model_len, sum(c + n for c, n in zip(b.prefill_contexts, b.prefill_lens)))
    logits = torch.full((b.num_tokens, width), float("-inf"), dtype=torch.float64, device=dev)
    bound = torch.zeros(b.num_tokens, dtype=torch.float64, device=dev)
    starts = torch.zeros(b.num_tokens, dtype=torch.int32, device=dev)
    ends = torch.zeros(b.num_tokens, dtype=torch.int32, device=dev)
    if b.num_prefill:
        rows = slice(b.num_padded_decode, b.num_tokens)
        k, s = gather_prefill_keys(b, kv_cache)
        args = (q_fp8[rows], k, s, w[rows], b.prefill_starts, b.prefill_ends)
        part = _f64_logits(*args)
        logits[rows, :part.shape[1]] = part
        bound[rows] = ref.mqa_bound(*args).amax(dim=1) if part.shape[1] else 0
        starts[rows], ends[rows] = b.prefill_starts, b.prefill_ends
    positions = ref.paged_positions(b.decode_lens, b.next_n)
    for i in range(b.decode_lens.shape[0]):
        length = int(b.decode_lens[i])
        if length <= 0:
            continue
        k, s = ref.gather_paged_keys(kv_cache, b.decode_tables, i, length, b.head_dim,
                                     b.block_size)
        rows = slice(i * b.next_n, (i + 1) * b.next_n)
        ke = (positions[rows] + 1).clamp(0, length).int()
        args = (q_fp8[rows], k, s, w[rows], torch.zeros_like(ke), ke)
        logits[rows, :length] = _f64_logits(*args)
        bound[rows] = ref.mqa_bound(*args).amax(dim=1)
        ends[rows] = ke
    expected = torch.full((b.num_tokens, b.top_k), -1, dtype=torch.int32, device=dev)
    select_into(logits, starts, ends, expected, b.top_k)
    return {"indices": expected, "logits": logits, "starts": starts, "ends": ends, "bound": bound,
            "kv_cache": kv_cache}


def judge_step(b: StepBatch, out: dict, expect: dict, division: str = "exact",
               layout: str = "normal") -> dict:
    """Selection (near-tie aware), padding rows -1, guard band intact, cache identical (or,
    for a K-cache writer declaring ``fp32_division: approximate``, within its bound:
    spec.cache_row) to the reference's in the writer's declared ``layout``."""
    heads = b.q.shape[1]
    slack = 0.0 if b.softmax_scale == 2.0 ** -4 else (b.head_dim + heads + 8) * U32
    buf = out["buffer"]
    got = buf[:b.num_tokens].clone()
    real = torch.ones(b.num_tokens, dtype=torch.bool, device=got.device)
    real[b.num_decode:b.num_padded_decode] = False
    row = compare_topk(got[real], expect["indices"][real], expect["logits"][real],
                       expect["starts"][real], expect["ends"][real], b.top_k,
                       slack=slack * expect["bound"][real])
    pad_rows = got[~real]
    pad_bad = int((pad_rows != -1).sum())
    guard = guard_violations(buf, b.num_tokens, b.top_k)
    region = b.block_size * b.head_dim
    expected_cache = expect["kv_cache"] if layout == "normal" else b.reference_cache(layout)
    cache = cache_row(out["kv_cache"], expected_cache, region, division)
    cache_bad = 0 if cache["passed"] else cache.get("mismatch_bytes", 1)
    problems = [row["detail"]] if row["detail"] else []
    problems += [f"{pad_bad} cells of graph-padding rows are not -1"] if pad_bad else []
    problems += [f"{guard} cells outside topk_indices_buffer[:num_tokens, :top_k] written"] if guard else []
    problems += [f"kv_cache: {cache['detail']}"] if cache_bad else []
    return {**row, "padding_violations": pad_bad, "guard_violations": guard,
            "cache_mismatch": cache_bad, "passed": not problems, "detail": "; ".join(problems)}
